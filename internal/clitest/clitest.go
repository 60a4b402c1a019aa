// Package clitest checks the programs' command lines (urfave/cli) in tests.
package clitest

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/urfave/cli/v3"
)

// defaultWord finds a usage that states a default itself ("default
// 7 days", "(default: ...)", "; default: every mount").
var defaultWord = regexp.MustCompile(`(?i)\bdefault\b`)

// DoubledDefaults lists the flags of root and its subcommands whose help
// line says "default" twice: a usage that states its default while the
// flag has a value that cli appends as "(default: …)" too. A flag whose
// default is not its zero value says it either way, never both.
func DoubledDefaults(root *cli.Command) []string {
	var found []string
	var walk func(path string, c *cli.Command)
	walk = func(path string, c *cli.Command) {
		for _, f := range c.Flags {
			line := fmt.Sprint(f)
			if len(defaultWord.FindAllString(line, -1)) > 1 {
				found = append(found, strings.TrimSpace(path+" "+strings.Join(f.Names(), "/"))+": "+line)
			}
		}
		for _, sub := range c.Commands {
			walk(path+" "+sub.Name, sub)
		}
	}
	walk(root.Name, root)
	return found
}
