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
	Daemon  string `json:"daemon"`
	Version string `json:"version"`
	Sysname string `json:"sysname"`
	Release string `json:"release"`
}

// Version asks charon for its version.
func (c *Client) Version() (Version, error) {
	r, err := c.cmd("version", nil)
	if err != nil {
		return Version{}, err
	}
	return Version{str(r, "daemon"), str(r, "version"), str(r, "sysname"), str(r, "release")}, nil
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
	var s Stats
	if w := sub(r, "workers"); w != nil {
		s.Workers = num(w, "total")
	}
	if i := sub(r, "ikesas"); i != nil {
		s.IKESAs, s.HalfOpen = num(i, "total"), num(i, "half-open")
	}
	if u := sub(r, "uptime"); u != nil {
		if t, err := time.Parse("Jan 02 15:04:05 2006", str(u, "since")); err == nil {
			s.UptimeSecs = int(time.Since(t).Seconds())
		}
	}
	return s, nil
}

// ConnMessage is the load-conn message for one tunnel: the same settings as
// its swanctl.conf section.
func ConnMessage(s *Spec, t Tunnel) *vici.Message {
	child := msg(
		"local_ts", []string{t.LocalTS.String()},
		"remote_ts", []string{t.RemoteTS.String()},
		"esp_proposals", []string{s.ESP},
		"mode", "tunnel",
		"policies_fwd_out", "yes",
		"hw_offload", s.HWOffloadConf(),
	)
	conn := msg(
		"local_addrs", []string{t.LocalAddr.String()},
		"remote_addrs", []string{t.RemoteAddr.String()},
		"local", msg("auth", "psk", "id", t.LocalID),
		"remote", msg("auth", "psk", "id", t.RemoteID),
		"children", msg(t.Child, child),
		"version", "2",
		"mobike", "no",
		"reauth_time", "0",
		"proposals", []string{s.IKE},
	)
	if s.Encap {
		conn.Set("encap", "yes")
	}
	return msg(t.Conn, conn)
}

// LoadConn loads (or replaces) one tunnel's connection.
func (c *Client) LoadConn(s *Spec, t Tunnel) error {
	_, err := c.cmd("load-conn", ConnMessage(s, t))
	if err != nil && s.HWOffload == "packet" && strings.Contains(err.Error(), "hw_offload") {
		v, _ := c.Version()
		return fmt.Errorf("%s: charon %s does not know hw_offload = packet (strongSwan 5.9.8 refuses it; the BlueField-3 benchmark ran 6.0.0): use --hw-offload crypto, auto or no, or a newer strongSwan (%w)", t.Conn, v.Version, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", t.Conn, err)
	}
	return nil
}

// LoadShared loads one tunnel's IKE pre-shared key under the seed's secret
// name (ike-tnlI), owned by both identities.
func (c *Client) LoadShared(t Tunnel, key PSK) error {
	_, err := c.cmd("load-shared", msg("id", t.Secret, "type", "IKE", "data", string(key.Bytes()),
		"owners", []string{t.LocalID, t.RemoteID}))
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
	return list(r, "keys"), nil
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
	Name        string      `json:"name"`
	LocalAddrs  []string    `json:"local_addrs"`
	RemoteAddrs []string    `json:"remote_addrs"`
	Version     string      `json:"version"`
	LocalIDs    []string    `json:"local_ids"`
	RemoteIDs   []string    `json:"remote_ids"`
	Children    []ConnChild `json:"children"`
}

// ConnChild is a child of a loaded connection.
type ConnChild struct {
	Name     string   `json:"name"`
	Mode     string   `json:"mode"`
	LocalTS  []string `json:"local_ts"`
	RemoteTS []string `json:"remote_ts"`
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
			cm := sub(m, name)
			if cm == nil {
				continue
			}
			cn := Conn{Name: name, LocalAddrs: list(cm, "local_addrs"), RemoteAddrs: list(cm, "remote_addrs"), Version: str(cm, "version")}
			for _, k := range cm.Keys() {
				if a := sub(cm, k); a != nil && strings.HasPrefix(k, "local") {
					cn.LocalIDs = append(cn.LocalIDs, str(a, "id"))
				} else if a != nil && strings.HasPrefix(k, "remote") {
					cn.RemoteIDs = append(cn.RemoteIDs, str(a, "id"))
				}
			}
			if ch := sub(cm, "children"); ch != nil {
				for _, cname := range ch.Keys() {
					cc := sub(ch, cname)
					cn.Children = append(cn.Children, ConnChild{Name: cname, Mode: str(cc, "mode"),
						LocalTS: list(cc, "local-ts"), RemoteTS: list(cc, "remote-ts")})
				}
			}
			out = append(out, cn)
		}
	}
	return out, nil
}

// IKESA is an IKE_SA as list-sas reports it. VICI never exposes keys.
type IKESA struct {
	Name        string    `json:"name"`
	UniqueID    string    `json:"uniqueid"`
	State       string    `json:"state"`
	LocalHost   string    `json:"local_host"`
	RemoteHost  string    `json:"remote_host"`
	LocalID     string    `json:"local_id"`
	RemoteID    string    `json:"remote_id"`
	Initiator   bool      `json:"initiator"`
	Established int       `json:"established_seconds"`
	Children    []ChildSA `json:"child_sas"`
}

// ChildSA is a CHILD_SA of an IKE_SA: SPIs, algorithms, counters, selectors.
type ChildSA struct {
	Name       string   `json:"name"`
	UniqueID   string   `json:"uniqueid"`
	State      string   `json:"state"`
	Mode       string   `json:"mode"`
	Protocol   string   `json:"protocol"`
	Encap      bool     `json:"encap"`
	SPIIn      string   `json:"spi_in"`
	SPIOut     string   `json:"spi_out"`
	EncrAlg    string   `json:"encr_alg"`
	EncrKey    int      `json:"encr_keysize"`
	BytesIn    int      `json:"bytes_in"`
	PacketsIn  int      `json:"packets_in"`
	BytesOut   int      `json:"bytes_out"`
	PacketsOut int      `json:"packets_out"`
	RekeyIn    int      `json:"rekey_seconds"`
	LocalTS    []string `json:"local_ts"`
	RemoteTS   []string `json:"remote_ts"`
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
			im := sub(m, name)
			if im == nil {
				continue
			}
			sa := IKESA{Name: name, UniqueID: str(im, "uniqueid"), State: str(im, "state"),
				LocalHost: str(im, "local-host"), RemoteHost: str(im, "remote-host"),
				LocalID: str(im, "local-id"), RemoteID: str(im, "remote-id"),
				Initiator: str(im, "initiator") == "yes", Established: num(im, "established")}
			if ch := sub(im, "child-sas"); ch != nil {
				for _, k := range ch.Keys() {
					cm := sub(ch, k)
					sa.Children = append(sa.Children, ChildSA{
						Name: str(cm, "name"), UniqueID: str(cm, "uniqueid"), State: str(cm, "state"),
						Mode: str(cm, "mode"), Protocol: str(cm, "protocol"), Encap: str(cm, "encap") == "yes",
						SPIIn: str(cm, "spi-in"), SPIOut: str(cm, "spi-out"),
						EncrAlg: str(cm, "encr-alg"), EncrKey: num(cm, "encr-keysize"),
						BytesIn: num(cm, "bytes-in"), PacketsIn: num(cm, "packets-in"),
						BytesOut: num(cm, "bytes-out"), PacketsOut: num(cm, "packets-out"),
						RekeyIn: num(cm, "rekey-time"),
						LocalTS: list(cm, "local-ts"), RemoteTS: list(cm, "remote-ts"),
					})
				}
			}
			out = append(out, sa)
		}
	}
	return out, nil
}

func str(m *vici.Message, k string) string {
	if m == nil {
		return ""
	}
	s, _ := m.Get(k).(string)
	return s
}

func num(m *vici.Message, k string) int {
	n, _ := strconv.Atoi(str(m, k))
	return n
}

func list(m *vici.Message, k string) []string {
	if m == nil {
		return nil
	}
	switch v := m.Get(k).(type) {
	case []string:
		return v
	case string:
		return []string{v}
	}
	return nil
}

func sub(m *vici.Message, k string) *vici.Message {
	if m == nil {
		return nil
	}
	s, _ := m.Get(k).(*vici.Message)
	return s
}
