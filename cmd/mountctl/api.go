package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

var httpClient = &http.Client{Timeout: 30 * time.Second}

// apiError is a problem+json answer, shown as its code and detail.
type apiError struct {
	Status int                 `json:"status"`
	Code   string              `json:"code"`
	Detail string              `json:"detail"`
	Errors []map[string]string `json:"errors"`
}

func (e *apiError) Error() string {
	msg := fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Detail)
	for _, f := range e.Errors {
		msg += fmt.Sprintf("; %s %s", f["field"], f["message"])
	}
	return msg
}

// call sends an API request and decodes the answer into out.
func (s *settings) call(ctx context.Context, method, path string, body, out any) error {
	if err := s.requireToken(); err != nil {
		return err
	}
	var r io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.apiBase()+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Access-Key", s.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach mountd at %s: %w", s.API, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		e := &apiError{Status: res.StatusCode}
		if json.Unmarshal(raw, e) != nil || e.Code == "" {
			e.Detail = strings.TrimSpace(string(raw))
		}
		return e
	}
	if out != nil && len(raw) > 0 {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// requestToken uses client credentials against the identity provider.
func (s *settings) requestToken(ctx context.Context, clientID, secret string, scope []string) (map[string]any, error) {
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {strings.Join(scope, " ")}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(s.API, "/")+"/oauth/v2/token", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(clientID)+":"+url.QueryEscape(secret))))
	res, err := httpClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the identity provider at %s: %w", s.API, err)
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("identity provider answered %d", res.StatusCode)
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("identity provider refused: %v (%v)", out["error"], out["error_description"])
	}
	return out, nil
}
