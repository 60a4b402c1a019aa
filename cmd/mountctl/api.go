package main

import (
	"context"
	"strings"
	"time"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
)

// api is the client of mountd with the command's token or, without one,
// with owner tokens from the client credentials, renewed before they
// expire and when the server refuses one.
func (s *settings) api() *client.Client {
	if s.client != nil {
		return s.client
	}
	if s.Token == "" && s.ClientID != "" && s.ClientSecret != "" {
		s.client = client.New(s.API, client.CredentialsSource(
			client.ClientCredentials(s.API, s.ClientID, s.ClientSecret, tokenScope(s.IDPName, s.ProjectID, "owner")), nil))
	} else {
		s.client = client.New(s.API, client.StaticToken(s.Token))
	}
	return s.client
}

// tokenScope is the mandatory scope items with role (the audience item
// names the idp and project).
func tokenScope(idpName, projectID, role string) []string {
	return []string{"openid", "sub", protocol.AudienceItem(idpName, projectID), "role:" + role}
}

// call sends an API call (path under /api/v1) and decodes the answer into out.
func (s *settings) call(ctx context.Context, method, path string, body, out any) error {
	if err := s.requireToken(); err != nil {
		return err
	}
	return s.api().Do(ctx, method, path, body, out)
}

// requestToken uses client credentials against the identity provider and
// returns the token answer as the identity provider gave it.
func (s *settings) requestToken(ctx context.Context, clientID, secret string, scope []string) (map[string]any, error) {
	tok, err := client.ClientCredentials(s.API, clientID, secret, scope).Token(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]any{"access_token": tok.AccessToken, "token_type": tok.TokenType}
	if !tok.Expiry.IsZero() {
		out["expires_in"] = int64(time.Until(tok.Expiry).Round(time.Second) / time.Second)
	}
	if sc, ok := tok.Extra("scope").(string); ok {
		out["scope"] = strings.Fields(sc)
	} else if sc, ok := tok.Extra("scope").([]any); ok {
		out["scope"] = sc
	}
	return out, nil
}
