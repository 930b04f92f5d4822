// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// ErrNotRunning means no daemon answers on the socket.
var ErrNotRunning = errors.New("the sluice daemon is not running")

// Client talks to a running daemon.
type Client struct {
	Socket string
	http   *http.Client
}

// NewClient returns a client for the daemon at socket (the CLI's default
// is gateway.yaml's api-socket default, config.DefaultAPISocket).
func NewClient(socket string) *Client {
	return &Client{Socket: socket, http: &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}},
	}}
}

// Gateway returns the gateway's status.
func (c *Client) Gateway() (*GatewayStatus, error) {
	var s GatewayStatus
	return &s, c.get("/"+Version+"/gateway", &s)
}

// Policies returns the per-policy counters.
func (c *Client) Policies() ([]PolicyStat, error) {
	var ps []PolicyStat
	return ps, c.get("/"+Version+"/gateway/policies", &ps)
}

func (c *Client) get(path string, v any) error {
	resp, err := c.http.Get("http://sluice" + path)
	if err != nil {
		switch {
		case errors.Is(err, os.ErrNotExist), errors.Is(err, errConnRefused):
			return fmt.Errorf("%w (no answer on %s; start it with 'sluice gateway run')", ErrNotRunning, c.Socket)
		case errors.Is(err, os.ErrPermission):
			return fmt.Errorf("permission denied on %s: run as root or as a member of the socket's group", c.Socket)
		}
		return fmt.Errorf("talking to the daemon on %s: %w", c.Socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e Error
		json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("daemon: %s (HTTP %d)", e.Error, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
