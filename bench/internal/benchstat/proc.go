package benchstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ClockTicks is USER_HZ, the unit of CPU times in /proc: 100 on every Linux
// architecture Go supports.
const ClockTicks = 100

// Stat is what the tools read of /proc/<pid>/stat.
type Stat struct {
	PPid                         int
	UTime, STime, CUTime, CSTime int64 // clock ticks
	Started                      int64 // clock ticks after boot: tells a reused pid apart
}

// CPUSeconds is the process's own user and system time.
func (s Stat) CPUSeconds() float64 { return float64(s.UTime+s.STime) / ClockTicks }

// ReadStat reads /proc/<pid>/stat (pid 0: this process).
func ReadStat(pid int) (Stat, error) {
	p := "/proc/self/stat"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		return Stat{}, err
	}
	// The command name may hold spaces: the fields start after its ')'.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("unexpected %s", p)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return Stat{}, fmt.Errorf("short %s", p)
	}
	// f[0] is field 3 (state): ppid is field 4, utime…cstime fields 14–17,
	// starttime field 22.
	n := func(field int) int64 { v, _ := strconv.ParseInt(f[field-3], 10, 64); return v }
	return Stat{PPid: int(n(4)), UTime: n(14), STime: n(15), CUTime: n(16), CSTime: n(17), Started: n(22)}, nil
}

// RSS reads a process's resident set size in bytes (VmRSS).
func RSS(pid int) (int64, error) {
	p := "/proc/" + strconv.Itoa(pid) + "/status"
	raw, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fields := strings.Fields(rest)
			if len(fields) < 1 {
				break
			}
			kb, err := strconv.ParseInt(fields[0], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in %s", p)
}

// Comm reads a process's command name.
func Comm(pid int) string {
	raw, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(raw))
}

// Pids lists the processes of the machine.
func Pids() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}
