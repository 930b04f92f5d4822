// SPDX-License-Identifier: Apache-2.0

package swan

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/strongswan/govici/vici"
)

// OverlayConn is one overlay peer keyed by IKE (host.yaml keying: ike): one
// IKE connection with one child whose selectors are the ones the manual
// plan would install, in transport or tunnel mode.
type OverlayConn struct {
	// Name names the connection, its child and its shared secret.
	Name                  string
	LocalAddr, RemoteAddr string
	LocalID, RemoteID     string
	// Auth is "psk" or "pubkey" (certificates).
	Auth string
	// CACert and Cert are PEM blobs (public) for certificate authentication.
	CACert, Cert []byte
	// CACertFile and CertFile name them in the printed swanctl.conf.
	CACertFile, CertFile string
	Mode                 string // transport or tunnel
	LocalTS, RemoteTS    []string
	ESP                  string
	// HWOffload is the child's hw_offload: no, yes (crypto), packet, auto.
	HWOffload    string
	ReplayWindow int
	// Child lifetimes (0: none).
	RekeyTime, LifeTime, RandTime time.Duration
	RekeyBytes, RekeyPackets      uint64
	Priority                      uint32
}

// HWOffloadFor maps host.yaml's offload to strongSwan's hw_offload.
func HWOffloadFor(offload string) string {
	if offload == "none" {
		return "no"
	}
	return hwOffloadConf[offload]
}

// ESPProposal is AES-GCM with a 16-byte ICV (the manual plan's
// rfc4106(gcm(aes)) 128-bit ICV), with X25519 for perfect forward secrecy
// on every rekey, and ESN when asked.
func ESPProposal(keyBits int, esn bool) string {
	p := fmt.Sprintf("aes%dgcm16-x25519", keyBits)
	if esn {
		return p + "-esn"
	}
	return p + "-noesn"
}

// OverlayIKEProposal is the IKE_SA's proposal.
const OverlayIKEProposal = "aes128gcm16-prfsha256-x25519"

func secs(d time.Duration) string { return strconv.Itoa(int(d/time.Second)) + "s" }

// plus10 is strongSwan's default life over a rekey limit: 10% more.
func plus10(n uint64) string { return strconv.FormatUint(n+n/10, 10) }

// childSettings are the child's settings in order, as swanctl.conf keys.
func (o *OverlayConn) childSettings() [][2]string {
	kv := [][2]string{
		{"mode", o.Mode},
		{"local_ts", strings.Join(o.LocalTS, ",")},
		{"remote_ts", strings.Join(o.RemoteTS, ",")},
		{"esp_proposals", o.ESP},
		{"replay_window", strconv.Itoa(o.ReplayWindow)},
		{"hw_offload", o.HWOffload},
		// trap: until the CHILD_SA is up, matching packets are held for
		// IKE (acquire), never sent in clear; the peer may also come up
		// later and initiate.
		{"start_action", "trap"},
		{"dpd_action", "trap"},
	}
	if o.Mode == "tunnel" {
		kv = append(kv, [2]string{"policies_fwd_out", "no"})
	}
	if o.RekeyTime > 0 {
		kv = append(kv, [2]string{"rekey_time", secs(o.RekeyTime)}, [2]string{"life_time", secs(o.LifeTime)}, [2]string{"rand_time", secs(o.RandTime)})
	}
	if o.RekeyBytes > 0 {
		kv = append(kv, [2]string{"rekey_bytes", strconv.FormatUint(o.RekeyBytes, 10)}, [2]string{"life_bytes", plus10(o.RekeyBytes)})
	}
	if o.RekeyPackets > 0 {
		kv = append(kv, [2]string{"rekey_packets", strconv.FormatUint(o.RekeyPackets, 10)}, [2]string{"life_packets", plus10(o.RekeyPackets)})
	}
	if o.Priority > 0 {
		kv = append(kv, [2]string{"priority", strconv.FormatUint(uint64(o.Priority), 10)})
	}
	return kv
}

// connSettings are the connection's own settings.
func (o *OverlayConn) connSettings() [][2]string {
	return [][2]string{
		{"version", "2"},
		{"local_addrs", o.LocalAddr},
		{"remote_addrs", o.RemoteAddr},
		{"proposals", OverlayIKEProposal},
		// No reauthentication: rekeying the IKE_SA keeps its CHILD_SAs,
		// where a reauthentication would rebuild them (break-before-make
		// unless charon.make_before_break).
		{"reauth_time", "0"},
		{"mobike", "no"},
		{"dpd_delay", "30s"},
	}
}

// Message is the load-conn message. Its settings are the ones
// WriteSwanctl prints (childSettings, connSettings); an error from
// encoding them is returned, not dropped.
func (o *OverlayConn) Message() (*vici.Message, error) {
	child := vici.NewMessage()
	for _, kv := range o.childSettings() {
		var v any = kv[1]
		if kv[0] == "local_ts" || kv[0] == "remote_ts" || kv[0] == "esp_proposals" {
			v = strings.Split(kv[1], ",")
		}
		if err := child.Set(kv[0], v); err != nil {
			return nil, fmt.Errorf("%s: child %s: %w", o.Name, kv[0], err)
		}
	}
	conn := vici.NewMessage()
	for _, kv := range o.connSettings() {
		var v any = kv[1]
		if strings.HasSuffix(kv[0], "_addrs") || kv[0] == "proposals" {
			v = []string{kv[1]}
		}
		if err := conn.Set(kv[0], v); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", o.Name, kv[0], err)
		}
	}
	local := overlayAuth{Auth: o.Auth, ID: o.LocalID}
	remote := overlayAuth{Auth: o.Auth, ID: o.RemoteID}
	if o.Auth == "pubkey" {
		local.Certs, remote.CACerts = []string{string(o.Cert)}, []string{string(o.CACert)}
	}
	lm, err := vici.MarshalMessage(local)
	if err != nil {
		return nil, fmt.Errorf("%s: local: %w", o.Name, err)
	}
	rm, err := vici.MarshalMessage(remote)
	if err != nil {
		return nil, fmt.Errorf("%s: remote: %w", o.Name, err)
	}
	for _, kv := range []struct {
		k string
		v *vici.Message
	}{{"local", lm}, {"remote", rm}, {"children", msg(o.Name, child)}} {
		if err := conn.Set(kv.k, kv.v); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", o.Name, kv.k, err)
		}
	}
	return vici.MarshalMessage(map[string]*vici.Message{o.Name: conn})
}

// overlayAuth is an overlay connection's local or remote authentication
// round; Certs (local) and CACerts (remote) are PEM, for pubkey only.
type overlayAuth struct {
	Auth    string   `vici:"auth"`
	ID      string   `vici:"id"`
	Certs   []string `vici:"certs"`
	CACerts []string `vici:"cacerts"`
}

// WriteSwanctl prints the connection as swanctl.conf would hold it, for
// dry runs. No secret is printed: the PSK is named by its file, the
// private key by its file.
func (o *OverlayConn) WriteSwanctl(w io.Writer, secretFrom string) {
	fmt.Fprintf(w, "connections {\n  %s {\n", o.Name)
	for _, kv := range o.connSettings() {
		fmt.Fprintf(w, "    %s = %s\n", kv[0], kv[1])
	}
	fmt.Fprintf(w, "    local {\n      auth = %s\n      id = %s\n", o.Auth, o.LocalID)
	if o.Auth == "pubkey" {
		fmt.Fprintf(w, "      certs = %s\n", o.CertFile)
	}
	fmt.Fprintf(w, "    }\n    remote {\n      auth = %s\n      id = %s\n", o.Auth, o.RemoteID)
	if o.Auth == "pubkey" {
		fmt.Fprintf(w, "      cacerts = %s\n", o.CACertFile)
	}
	fmt.Fprintf(w, "    }\n    children {\n      %s {\n", o.Name)
	for _, kv := range o.childSettings() {
		fmt.Fprintf(w, "        %s = %s\n", kv[0], kv[1])
	}
	fmt.Fprintf(w, "      }\n    }\n  }\n}\n")
	if o.Auth == "psk" {
		fmt.Fprintf(w, "secrets {\n  ike-%s {\n    id-1 = %s\n    id-2 = %s\n    secret = <redacted: read from %s>\n  }\n}\n", o.Name, o.LocalID, o.RemoteID, secretFrom)
	} else {
		fmt.Fprintf(w, "# private key: loaded from %s (load-key), never printed\n", secretFrom)
	}
}

// OverlaySecret is what authenticates this host: a PSK, or a PEM private
// key. Neither ever prints.
type OverlaySecret struct {
	PSK PSK
	Key PSK // the private key's PEM, kept in a PSK for its redacting String
}

// LoadOverlay loads the secret and then the connection (which installs
// its trap policies).
func (c *Client) LoadOverlay(o *OverlayConn, s OverlaySecret) error {
	if o.Auth == "psk" {
		if err := c.marshalCmd("load-shared", viciShared{ID: "ike-" + o.Name, Type: "IKE", Data: string(s.PSK.Bytes()),
			Owners: []string{o.LocalID, o.RemoteID}}); err != nil {
			return fmt.Errorf("%s: %w", o.Name, err)
		}
	} else {
		if _, err := c.cmd("load-key", msg("type", "any", "data", string(s.Key.Bytes()))); err != nil {
			return fmt.Errorf("%s: private key: %w", o.Name, err)
		}
	}
	m, err := o.Message()
	if err != nil {
		return err
	}
	if _, err := c.cmd("load-conn", m); err != nil {
		if o.HWOffload == "packet" && strings.Contains(err.Error(), "hw_offload") {
			v, _ := c.Version()
			return fmt.Errorf("%s: charon %s does not know hw_offload = packet (strongSwan 6 does; Debian bookworm has 5.9.8): use offload: crypto or auto (%w)", o.Name, v.Version, err)
		}
		return fmt.Errorf("%s: %w", o.Name, err)
	}
	return nil
}

// UnloadOverlay unloads the connection (removing its trap policies),
// terminates its IKE_SA (removing its SAs and policies) and unloads its
// shared secret. Missing pieces are not errors: teardown may run twice.
func (c *Client) UnloadOverlay(name string) error {
	if err := c.UnloadConn(name); err != nil && !strings.Contains(err.Error(), "not found") {
		return err
	}
	// force: teardown removes the route to the peer first (so no VTEP
	// packet leaves in clear), so the peer's answer to DELETE may never
	// come; charon sends DELETE once and removes the SAs at once.
	if err := c.TerminateForce(name); err != nil {
		// charon 5.9 may report a forced termination whose DELETE could
		// not be sent as failed although the SA is gone: what counts is
		// that none is left.
		if left, lerr := c.OverlayChildren(name); lerr != nil || len(left) > 0 {
			return err
		}
		if n, _ := c.ikeSACount(name); n > 0 {
			return err
		}
	}
	if err := c.UnloadShared("ike-" + name); err != nil && !strings.Contains(err.Error(), "not found") {
		return err
	}
	return nil
}

// TerminateForce deletes the IKE_SAs of connection ike without waiting for
// the peer's answer (none is not an error): charon sends DELETE once and
// destroys the IKE_SA, its CHILD_SAs and their policies at once. Timeout 0
// matters: with force and a timeout, charon 5.9.8 (controller.c
// terminate_ike) first deletes gracefully and waits the whole timeout for
// an answer that, with the route to the peer gone, never comes.
func (c *Client) TerminateForce(ike string) error {
	_, err := c.cmd("terminate", msg("ike", ike, "force", "yes", "timeout", "0", "loglevel", "-1"))
	if err != nil && !strings.Contains(err.Error(), "no matching SAs") {
		return err
	}
	return nil
}

// Reauth reauthenticates the IKE_SA of connection ike (swanctl --rekey
// --ike NAME --reauth): its CHILD_SAs are rebuilt, break-before-make
// unless charon.make_before_break = yes.
func (c *Client) Reauth(ike string) error {
	_, err := c.cmd("rekey", msg("ike", ike, "reauth", "yes"))
	return err
}

// RekeyIKE rekeys the IKE_SA of connection ike (swanctl --rekey --ike
// NAME): new IKE keys, and the CHILD_SAs move to the new IKE_SA as they
// are (their SAs, SPIs and keys do not change; RFC 7296 2.8).
func (c *Client) RekeyIKE(ike string) error {
	_, err := c.cmd("rekey", msg("ike", ike))
	return err
}

// ReloadSettings rereads strongswan.conf (swanctl --reload-settings).
func (c *Client) ReloadSettings() error {
	_, err := c.cmd("reload-settings", nil)
	return err
}

// RekeyChild rekeys the installed CHILD_SAs of child (swanctl --rekey
// --child NAME).
func (c *Client) RekeyChild(child string) error {
	_, err := c.cmd("rekey", msg("child", child))
	return err
}

// OverlayChild is one CHILD_SA of an overlay connection as charon reports
// it (list-sas): its SPIs (as the kernel holds them), its state, how long
// ago it was installed and when it rekeys.
type OverlayChild struct {
	State          string `json:"state"`
	SPIIn, SPIOut  uint32
	InstalledSecs  int `json:"installed_seconds"`
	RekeyInSecs    int `json:"rekey_in_seconds"`
	ExpiresInSecs  int `json:"expires_in_seconds"`
	PacketsIn      int `json:"packets_in"`
	PacketsOut     int `json:"packets_out"`
	IKEState       string
	IKEEstablished int
}

// OverlayChildren lists the CHILD_SAs of the IKE_SAs of connection name.
func (c *Client) OverlayChildren(name string) ([]OverlayChild, error) {
	ms, err := c.s.StreamedCommandRequest("list-sas", "list-sa", msg("noblock", "yes", "ike", name))
	if err != nil {
		return nil, fmt.Errorf("list-sas on %s: %w", c.URI, err)
	}
	var out []OverlayChild
	for _, m := range ms {
		im, ok := m.Get(name).(*vici.Message)
		if !ok {
			continue
		}
		var ike viciOverlayIKE
		if err := vici.UnmarshalMessage(im, &ike); err != nil {
			return nil, fmt.Errorf("list-sas on %s: %s: %w", c.URI, name, err)
		}
		err := eachSub(im, "child-sas", func(_ string, cm *vici.Message) error {
			var ch viciOverlayChild
			if err := vici.UnmarshalMessage(cm, &ch); err != nil {
				return err
			}
			in, _ := strconv.ParseUint(ch.SPIIn, 16, 32)
			out32, _ := strconv.ParseUint(ch.SPIOut, 16, 32)
			out = append(out, OverlayChild{State: ch.State, SPIIn: uint32(in), SPIOut: uint32(out32),
				InstalledSecs: ch.Installed, RekeyInSecs: ch.Rekey, ExpiresInSecs: ch.Life,
				PacketsIn: ch.PacketsIn, PacketsOut: ch.PacketsOut,
				IKEState: ike.State, IKEEstablished: ike.Established})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list-sas on %s: %s: %w", c.URI, name, err)
		}
	}
	return out, nil
}

// viciOverlayIKE and viciOverlayChild are the parts of list-sas that
// OverlayChildren reads.
type viciOverlayIKE struct {
	State       string `vici:"state"`
	Established int    `vici:"established"`
}

type viciOverlayChild struct {
	State      string `vici:"state"`
	SPIIn      string `vici:"spi-in"`
	SPIOut     string `vici:"spi-out"`
	Installed  int    `vici:"install-time"`
	Rekey      int    `vici:"rekey-time"`
	Life       int    `vici:"life-time"`
	PacketsIn  int    `vici:"packets-in"`
	PacketsOut int    `vici:"packets-out"`
}

// ikeSACount counts the IKE_SAs of connection name.
func (c *Client) ikeSACount(name string) (int, error) {
	ms, err := c.s.StreamedCommandRequest("list-sas", "list-sa", msg("noblock", "yes", "ike", name))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range ms {
		if _, ok := m.Get(name).(*vici.Message); ok {
			n++
		}
	}
	return n, nil
}

// ConnNames lists the names of the loaded connections.
func (c *Client) ConnNames() ([]string, error) {
	r, err := c.cmd("get-conns", nil)
	if err != nil {
		return nil, err
	}
	var m struct {
		Conns []string `vici:"conns"`
	}
	if err := vici.UnmarshalMessage(r, &m); err != nil {
		return nil, fmt.Errorf("get-conns on %s: %w", c.URI, err)
	}
	return m.Conns, nil
}
