// SPDX-License-Identifier: Apache-2.0

package swan

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/strongswan/govici/vici"
)

// DefaultURI is charon's VICI socket when strongswan.conf does not move it.
const DefaultURI = "unix:///var/run/charon.vici"

// ErrNoCharon is wrapped by Connect's error when nothing answers on the socket.
var ErrNoCharon = errors.New("charon is not running or the VICI socket is wrong")

// Client is one VICI session. A session runs one command at a time; use
// several clients for concurrent requests.
type Client struct {
	URI string
	s   *vici.Session
}

// ParseURI splits a VICI URI: unix:///path or tcp://host:port (swanctl's --uri syntax).
func ParseURI(uri string) (network, addr string, err error) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", "", fmt.Errorf("--uri %q: %v (use unix:///path/charon.vici or tcp://host:port)", uri, err)
	}
	switch u.Scheme {
	case "unix":
		p := u.Path
		if p == "" {
			p = u.Opaque
		}
		if p == "" {
			return "", "", fmt.Errorf("--uri %q: no socket path (use unix:///var/run/charon.vici)", uri)
		}
		return "unix", p, nil
	case "tcp":
		if u.Host == "" {
			return "", "", fmt.Errorf("--uri %q: no host:port (use tcp://127.0.0.1:4502)", uri)
		}
		return "tcp", u.Host, nil
	}
	return "", "", fmt.Errorf("--uri %q: scheme must be unix:// or tcp://", uri)
}

// Connect opens a session to charon's VICI socket.
func Connect(ctx context.Context, uri string) (*Client, error) {
	network, addr, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	s, err := vici.NewSession(vici.WithAddr(network, addr), vici.WithDialContext(func(_ context.Context, n, a string) (net.Conn, error) {
		return d.DialContext(ctx, n, a)
	}))
	if err != nil {
		return nil, fmt.Errorf("%w: tried %s (%v); start charon (systemctl start strongswan) or pass --uri with the socket in strongswan.conf's charon.plugins.vici.socket", ErrNoCharon, uri, err)
	}
	return &Client{URI: uri, s: s}, nil
}

// Close ends the session.
func (c *Client) Close() error { return c.s.Close() }

func (c *Client) cmd(name string, m *vici.Message) (*vici.Message, error) {
	r, err := c.s.CommandRequest(name, m)
	if err != nil {
		if r != nil { // the command ran and failed: err carries charon's errmsg
			return r, fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "vici: command failed: "))
		}
		return nil, fmt.Errorf("%s on %s: %w", name, c.URI, err)
	}
	return r, nil
}

// marshalCmd runs a command whose arguments are a tagged struct.
func (c *Client) marshalCmd(name string, args any) error {
	m, err := vici.MarshalMessage(args)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	_, err = c.cmd(name, m)
	return err
}

// msg builds the arguments of a command from literal key/value pairs.
func msg(kv ...any) *vici.Message {
	m := vici.NewMessage()
	for i := 0; i+1 < len(kv); i += 2 {
		if err := m.Set(kv[i].(string), kv[i+1]); err != nil {
			panic(err) // only our own literals reach here
		}
	}
	return m
}

// Version is charon's answer to "version".
type Version struct {
	Daemon  string `json:"daemon" vici:"daemon"`
	Version string `json:"version" vici:"version"`
	Sysname string `json:"sysname" vici:"sysname"`
	Release string `json:"release" vici:"release"`
}

// Version asks charon for its version.
func (c *Client) Version() (Version, error) {
	r, err := c.cmd("version", nil)
	if err != nil {
		return Version{}, err
	}
	var v Version
	if err := vici.UnmarshalMessage(r, &v); err != nil {
		return Version{}, fmt.Errorf("charon's version on %s: %w", c.URI, err)
	}
	return v, nil
}

// Stats is the part of charon's "stats" sluice uses.
type Stats struct {
	Workers    int `json:"workers"`
	IKESAs     int `json:"ike_sas"`
	HalfOpen   int `json:"half_open"`
	UptimeSecs int `json:"uptime_seconds"`
}

// Stats asks charon for its worker and IKE_SA counts.
func (c *Client) Stats() (Stats, error) {
	r, err := c.cmd("stats", nil)
	if err != nil {
		return Stats{}, err
	}
	var m viciStats
	if err := vici.UnmarshalMessage(r, &m); err != nil {
		return Stats{}, fmt.Errorf("charon's stats on %s: %w", c.URI, err)
	}
	s := Stats{Workers: m.Workers.Total, IKESAs: m.IKESAs.Total, HalfOpen: m.IKESAs.HalfOpen}
	if t, err := time.Parse("Jan 02 15:04:05 2006", m.Uptime.Since); err == nil {
		s.UptimeSecs = int(time.Since(t).Seconds())
	}
	return s, nil
}

// viciStats is the part of charon's "stats" answer that Stats reads.
type viciStats struct {
	Workers struct {
		Total int `vici:"total"`
	} `vici:"workers"`
	IKESAs struct {
		Total    int `vici:"total"`
		HalfOpen int `vici:"half-open"`
	} `vici:"ikesas"`
	Uptime struct {
		Since string `vici:"since"`
	} `vici:"uptime"`
}

// viciConn is one load-conn connection: the same settings as its
// swanctl.conf section (conf.go), declared once as tagged fields that
// vici.MarshalMessage encodes.
type viciConn struct {
	LocalAddrs  []string             `vici:"local_addrs"`
	RemoteAddrs []string             `vici:"remote_addrs"`
	Local       viciAuthRound        `vici:"local"`
	Remote      viciAuthRound        `vici:"remote"`
	Children    map[string]viciChild `vici:"children"`
	Version     int                  `vici:"version"`
	Mobike      bool                 `vici:"mobike"`
	ReauthTime  int                  `vici:"reauth_time"`
	Proposals   []string             `vici:"proposals"`
	Encap       bool                 `vici:"encap"`
}

// viciAuthRound is a connection's local or remote authentication round.
type viciAuthRound struct {
	Auth string `vici:"auth"`
	ID   string `vici:"id"`
}

// viciChild is one CHILD_SA configuration of a connection.
type viciChild struct {
	LocalTS        []string `vici:"local_ts"`
	RemoteTS       []string `vici:"remote_ts"`
	ESPProposals   []string `vici:"esp_proposals"`
	Mode           string   `vici:"mode"`
	PoliciesFwdOut bool     `vici:"policies_fwd_out"`
	HWOffload      string   `vici:"hw_offload"`
}

// viciShared is a load-shared request: a secret and the identities that
// own it. It holds the key: it is only ever marshalled to charon.
type viciShared struct {
	ID     string   `vici:"id"`
	Type   string   `vici:"type"`
	Data   string   `vici:"data"`
	Owners []string `vici:"owners"`
}

// ConnMessage is the load-conn message for one tunnel: the same settings as
// its swanctl.conf section.
func ConnMessage(s *Spec, t Tunnel) (*vici.Message, error) {
	conn := viciConn{
		LocalAddrs:  []string{t.LocalAddr.String()},
		RemoteAddrs: []string{t.RemoteAddr.String()},
		Local:       viciAuthRound{Auth: "psk", ID: t.LocalID},
		Remote:      viciAuthRound{Auth: "psk", ID: t.RemoteID},
		Children: map[string]viciChild{t.Child: {
			LocalTS:        []string{t.LocalTS.String()},
			RemoteTS:       []string{t.RemoteTS.String()},
			ESPProposals:   []string{s.ESP},
			Mode:           "tunnel",
			PoliciesFwdOut: true,
			HWOffload:      s.HWOffloadConf(),
		}},
		Version:   2,
		Proposals: []string{s.IKE},
		Encap:     s.Encap,
	}
	m, err := vici.MarshalMessage(map[string]viciConn{t.Conn: conn})
	if err != nil {
		return nil, fmt.Errorf("%s: load-conn message: %w", t.Conn, err)
	}
	return m, nil
}

// LoadConn loads (or replaces) one tunnel's connection.
func (c *Client) LoadConn(s *Spec, t Tunnel) error {
	m, err := ConnMessage(s, t)
	if err != nil {
		return err
	}
	_, err = c.cmd("load-conn", m)
	if err != nil && s.HWOffload == "packet" && strings.Contains(err.Error(), "hw_offload") {
		v, _ := c.Version()
		return fmt.Errorf("%s: charon %s does not know hw_offload = packet (strongSwan 5.9.8 refuses it; the BlueField-3 benchmark ran 6.0.0): use --hw-offload crypto, auto or no, or a newer strongSwan (%w)", t.Conn, v.Version, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", t.Conn, err)
	}
	return nil
}

// LoadShared loads one tunnel's IKE pre-shared key under the BlueField-3 benchmark's secret
// name (ike-tnlI), owned by both identities.
func (c *Client) LoadShared(t Tunnel, key PSK) error {
	err := c.marshalCmd("load-shared", viciShared{ID: t.Secret, Type: "IKE", Data: string(key.Bytes()),
		Owners: []string{t.LocalID, t.RemoteID}})
	if err != nil {
		return fmt.Errorf("%s: %w", t.Secret, err)
	}
	return nil
}

// UnloadConn removes a connection (its SAs stay until terminated).
func (c *Client) UnloadConn(name string) error {
	_, err := c.cmd("unload-conn", msg("name", name))
	return err
}

// UnloadShared removes a shared key by its name.
func (c *Client) UnloadShared(id string) error {
	_, err := c.cmd("unload-shared", msg("id", id))
	return err
}

// SharedKeys lists the names of the loaded shared keys (never the keys).
func (c *Client) SharedKeys() ([]string, error) {
	r, err := c.cmd("get-shared", nil)
	if err != nil {
		return nil, err
	}
	var m struct {
		Keys []string `vici:"keys"`
	}
	if err := vici.UnmarshalMessage(r, &m); err != nil {
		return nil, fmt.Errorf("get-shared on %s: %w", c.URI, err)
	}
	return m.Keys, nil
}

// Initiate brings up one child (and its IKE_SA), waiting up to timeout.
func (c *Client) Initiate(ike, child string, timeout time.Duration) error {
	_, err := c.cmd("initiate", msg("ike", ike, "child", child,
		"timeout", strconv.Itoa(int(timeout/time.Millisecond)), "init-limits", "no", "loglevel", "-1"))
	return err
}

// Terminate deletes the IKE_SAs of a connection (and their children).
func (c *Client) Terminate(ike string, timeout time.Duration) error {
	_, err := c.cmd("terminate", msg("ike", ike, "timeout", strconv.Itoa(int(timeout/time.Millisecond)), "loglevel", "-1"))
	if err != nil && strings.Contains(err.Error(), "no matching SAs") {
		return nil
	}
	return err
}

// Conn is a loaded connection as list-conns reports it.
type Conn struct {
	Name        string      `json:"name" vici:"-"`
	LocalAddrs  []string    `json:"local_addrs" vici:"local_addrs"`
	RemoteAddrs []string    `json:"remote_addrs" vici:"remote_addrs"`
	Version     string      `json:"version" vici:"version"`
	LocalIDs    []string    `json:"local_ids" vici:"-"`
	RemoteIDs   []string    `json:"remote_ids" vici:"-"`
	Children    []ConnChild `json:"children" vici:"-"`
}

// ConnChild is a child of a loaded connection.
type ConnChild struct {
	Name     string   `json:"name" vici:"-"`
	Mode     string   `json:"mode" vici:"mode"`
	LocalTS  []string `json:"local_ts" vici:"local-ts"`
	RemoteTS []string `json:"remote_ts" vici:"remote-ts"`
}

// viciAuth is a local or remote authentication round of a connection.
type viciAuth struct {
	ID string `vici:"id"`
}

// ListConns returns every loaded connection.
func (c *Client) ListConns() ([]Conn, error) {
	ms, err := c.s.StreamedCommandRequest("list-conns", "list-conn", nil)
	if err != nil {
		return nil, fmt.Errorf("list-conns on %s: %w", c.URI, err)
	}
	var out []Conn
	for _, m := range ms {
		for _, name := range m.Keys() {
			cm, ok := m.Get(name).(*vici.Message)
			if !ok {
				continue
			}
			cn := Conn{Name: name}
			if err := vici.UnmarshalMessage(cm, &cn); err != nil {
				return nil, fmt.Errorf("list-conns on %s: %s: %w", c.URI, name, err)
			}
			// The authentication rounds are local, local-1, remote-2...:
			// named by charon, so they are found by prefix, in order.
			for _, k := range cm.Keys() {
				am, ok := cm.Get(k).(*vici.Message)
				if !ok || (!strings.HasPrefix(k, "local") && !strings.HasPrefix(k, "remote")) {
					continue
				}
				var a viciAuth
				if err := vici.UnmarshalMessage(am, &a); err != nil {
					return nil, fmt.Errorf("list-conns on %s: %s.%s: %w", c.URI, name, k, err)
				}
				if strings.HasPrefix(k, "local") {
					cn.LocalIDs = append(cn.LocalIDs, a.ID)
				} else {
					cn.RemoteIDs = append(cn.RemoteIDs, a.ID)
				}
			}
			err := eachSub(cm, "children", func(cname string, cc *vici.Message) error {
				ch := ConnChild{Name: cname}
				err := vici.UnmarshalMessage(cc, &ch)
				cn.Children = append(cn.Children, ch)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("list-conns on %s: %s: %w", c.URI, name, err)
			}
			out = append(out, cn)
		}
	}
	return out, nil
}

// eachSub calls f with each named section of m's section k, in charon's
// order (a map would lose it).
func eachSub(m *vici.Message, k string, f func(name string, sub *vici.Message) error) error {
	sec, ok := m.Get(k).(*vici.Message)
	if !ok {
		return nil
	}
	for _, name := range sec.Keys() {
		sub, ok := sec.Get(name).(*vici.Message)
		if !ok {
			return fmt.Errorf("%s.%s is not a section", k, name)
		}
		if err := f(name, sub); err != nil {
			return fmt.Errorf("%s.%s: %w", k, name, err)
		}
	}
	return nil
}

// IKESA is an IKE_SA as list-sas reports it. VICI never exposes keys.
type IKESA struct {
	Name        string    `json:"name" vici:"-"`
	UniqueID    string    `json:"uniqueid" vici:"uniqueid"`
	State       string    `json:"state" vici:"state"`
	LocalHost   string    `json:"local_host" vici:"local-host"`
	RemoteHost  string    `json:"remote_host" vici:"remote-host"`
	LocalID     string    `json:"local_id" vici:"local-id"`
	RemoteID    string    `json:"remote_id" vici:"remote-id"`
	Initiator   bool      `json:"initiator" vici:"initiator"`
	Established int       `json:"established_seconds" vici:"established"`
	Children    []ChildSA `json:"child_sas" vici:"-"`
}

// ChildSA is a CHILD_SA of an IKE_SA: SPIs, algorithms, counters, selectors.
type ChildSA struct {
	Name       string   `json:"name" vici:"name"`
	UniqueID   string   `json:"uniqueid" vici:"uniqueid"`
	State      string   `json:"state" vici:"state"`
	Mode       string   `json:"mode" vici:"mode"`
	Protocol   string   `json:"protocol" vici:"protocol"`
	Encap      bool     `json:"encap" vici:"encap"`
	SPIIn      string   `json:"spi_in" vici:"spi-in"`
	SPIOut     string   `json:"spi_out" vici:"spi-out"`
	EncrAlg    string   `json:"encr_alg" vici:"encr-alg"`
	EncrKey    int      `json:"encr_keysize" vici:"encr-keysize"`
	BytesIn    int      `json:"bytes_in" vici:"bytes-in"`
	PacketsIn  int      `json:"packets_in" vici:"packets-in"`
	BytesOut   int      `json:"bytes_out" vici:"bytes-out"`
	PacketsOut int      `json:"packets_out" vici:"packets-out"`
	RekeyIn    int      `json:"rekey_seconds" vici:"rekey-time"`
	LocalTS    []string `json:"local_ts" vici:"local-ts"`
	RemoteTS   []string `json:"remote_ts" vici:"remote-ts"`
}

// ListSAs returns every IKE_SA with its CHILD_SAs.
func (c *Client) ListSAs() ([]IKESA, error) {
	ms, err := c.s.StreamedCommandRequest("list-sas", "list-sa", msg("noblock", "yes"))
	if err != nil {
		return nil, fmt.Errorf("list-sas on %s: %w", c.URI, err)
	}
	var out []IKESA
	for _, m := range ms {
		for _, name := range m.Keys() {
			im, ok := m.Get(name).(*vici.Message)
			if !ok {
				continue
			}
			sa := IKESA{Name: name}
			if err := vici.UnmarshalMessage(im, &sa); err != nil {
				return nil, fmt.Errorf("list-sas on %s: %s: %w", c.URI, name, err)
			}
			err := eachSub(im, "child-sas", func(_ string, cm *vici.Message) error {
				var ch ChildSA
				err := vici.UnmarshalMessage(cm, &ch)
				sa.Children = append(sa.Children, ch)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("list-sas on %s: %s: %w", c.URI, name, err)
			}
			out = append(out, sa)
		}
	}
	return out, nil
}
