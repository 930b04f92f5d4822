// SPDX-License-Identifier: Apache-2.0

// Package kubetest starts a real etcd and a real kube-apiserver for tests
// (no fake client): scripts/kube-apiserver.sh, run by make setup, builds the
// API server from its Go modules into a cache and installs Debian's etcd.
// Each server listens on free loopback ports and keeps its data in the
// test's temporary directory; authentication is a static token file, so a
// test can act as the administrator or as one host's agent.
package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sluice/internal/fileread"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"sluice/internal/fleet"
)

// Version is the Kubernetes release scripts/kube-apiserver.sh builds.
const Version = "1.37.2"

// APIServerBinary is where scripts/kube-apiserver.sh caches the binary;
// SLUICE_KUBE_APISERVER overrides it.
func APIServerBinary() string {
	if p := os.Getenv("SLUICE_KUBE_APISERVER"); p != "" {
		return p
	}
	return "/var/cache/sluice/kube-apiserver-v" + Version
}

// User is a static-token identity.
type User struct {
	Name   string
	Groups []string
	token  string
}

// Server is a running etcd + kube-apiserver pair.
type Server struct {
	URL   string
	dir   string
	etcd  *proc
	api   *proc
	users map[string]*User
	// apiArgs are kept so Restart starts the same server again.
	apiArgs []string
	etcdURL string
}

type proc struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
}

func start(dir, name string, argv ...string) (*proc, error) {
	lf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &proc{cmd: cmd, log: lf, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *proc) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.log.Close()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Need returns a started server, stopped at the end; users are the
// identities besides "admin" (group system:masters). It waits for a
// kube-apiserver build that make setup started and that is still running.
// Without the binary or etcd it skips, except under CI (CI=true), where
// make setup has run and a missing server is a failure, not a reason to
// skip the fleet tests.
func Need(t testing.TB, users ...User) *Server {
	t.Helper()
	missing := t.Skip
	if os.Getenv("CI") == "true" {
		missing = t.Fatal
	}
	if err := awaitBinary(); err != nil {
		missing(err)
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		missing("etcd not installed: run make setup (apt-get install etcd-server)")
	}
	s, err := Start(t.TempDir(), users...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Start starts etcd and the API server with their data in dir.
func Start(dir string, users ...User) (*Server, error) {
	s := &Server{dir: dir, users: map[string]*User{}}
	all := append([]User{{Name: "admin", Groups: []string{"system:masters"}}}, users...)
	var tokens strings.Builder
	for i := range all {
		u := all[i]
		u.token = token()
		s.users[u.Name] = &u
		fmt.Fprintf(&tokens, "%s,%s,%s,\"%s\"\n", u.token, u.Name, u.Name, strings.Join(u.Groups, ","))
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens.String()), 0o600); err != nil {
		return nil, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	saKey := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(saKey, keyPEM, 0o600); err != nil {
		return nil, err
	}
	// Pod Security at baseline by default, as a hardened cluster has it:
	// the agent's privileged pods are admitted only in a namespace
	// labelled privileged (deploy/rbac.yaml).
	admission := filepath.Join(dir, "admission.yaml")
	if err := os.WriteFile(admission, []byte(podSecurityBaseline), 0o600); err != nil {
		return nil, err
	}
	ep, err := freePort()
	if err != nil {
		return nil, err
	}
	pp, err := freePort()
	if err != nil {
		return nil, err
	}
	s.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", ep)
	if err := s.startEtcd(pp); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		s.Stop()
		return nil, err
	}
	s.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
	s.apiArgs = []string{APIServerBinary(),
		"--etcd-servers=" + s.etcdURL,
		"--etcd-prefix=/registry",
		fmt.Sprintf("--secure-port=%d", port), "--bind-address=127.0.0.1", // Advertised to nobody: the endpoint reconciler is off (it refuses loopback).
		"--advertise-address=192.0.2.1", "--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + saKey, "--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		// One test server on a shared 2-core machine: no flow control
		// queues, fewer watch caches to warm.
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		// As on every real cluster: the DaemonSet is privileged.
		"--allow-privileged=true",
		"--admission-control-config-file=" + admission,
	}
	if err := s.startAPI(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// podSecurityBaseline makes baseline the Pod Security level of every
// namespace without a pod-security.kubernetes.io/enforce label.
const podSecurityBaseline = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: PodSecurity
    configuration:
      apiVersion: pod-security.admission.config.k8s.io/v1
      kind: PodSecurityConfiguration
      defaults: {enforce: baseline, enforce-version: latest}
      exemptions: {}
`

func (s *Server) startEtcd(peerPort int) error {
	var err error
	s.etcd, err = start(s.dir, "etcd", "etcd", "--data-dir="+filepath.Join(s.dir, "etcd"),
		"--listen-client-urls="+s.etcdURL, "--advertise-client-urls="+s.etcdURL,
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", peerPort),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", peerPort),
		fmt.Sprintf("--initial-cluster=default=http://127.0.0.1:%d", peerPort),
		"--unsafe-no-fsync", "--log-level=warn")
	return err
}

func (s *Server) startAPI() error {
	var err error
	if s.api, err = start(s.dir, fmt.Sprintf("kube-apiserver-%d", time.Now().UnixNano()), s.apiArgs...); err != nil {
		return err
	}
	limit := 3 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("SLUICE_KUBE_READY_TIMEOUT")); err == nil {
		limit = d // the test VM (qemu TCG) takes minutes
	}
	return s.waitReady(limit)
}

// waitReady polls /readyz as the administrator.
func (s *Server) waitReady(limit time.Duration) error {
	cfg := s.Config("admin")
	tr, err := rest.TransportFor(cfg)
	if err != nil {
		return err
	}
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-s.api.done:
			return fmt.Errorf("kube-apiserver exited:\n%s", s.LogTail(30))
		default:
		}
		resp, err := c.Get(s.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	return fmt.Errorf("kube-apiserver not ready after %v:\n%s", limit, s.LogTail(30))
}

// LogTail is the end of the API server's log.
func (s *Server) LogTail(n int) string {
	if s.api == nil {
		return ""
	}
	b, _ := fileread.Read(s.api.log.Name(), fileread.StateLimit)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Config is a client configuration acting as user.
func (s *Server) Config(user string) *rest.Config {
	u := s.users[user]
	if u == nil {
		panic("kubetest: no user " + user)
	}
	return &rest.Config{Host: s.URL, BearerToken: u.token, TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS: 200, Burst: 400}
}

// Kubeconfig writes a kubeconfig file for user (an agent off-cluster).
func (s *Server) Kubeconfig(user string) (string, error) {
	u := s.users[user]
	p := filepath.Join(s.dir, "kubeconfig-"+user)
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: %q, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: %q}}]
current-context: test
`, s.URL, user, u.token, user)
	return p, os.WriteFile(p, []byte(text), 0o600)
}

var stopMu sync.Mutex

// StopAPI stops the API server only (etcd keeps the data): an outage.
func (s *Server) StopAPI() {
	stopMu.Lock()
	defer stopMu.Unlock()
	s.api.stop()
}

// StartAPI starts the API server again on the same port and data.
func (s *Server) StartAPI(ctx context.Context) error {
	return s.startAPI()
}

// Stop stops both servers.
func (s *Server) Stop() {
	stopMu.Lock()
	defer stopMu.Unlock()
	if s.api != nil {
		s.api.stop()
	}
	if s.etcd != nil {
		s.etcd.stop()
	}
}

// Install applies the repository's deploy/crds/*.yaml and deploy/rbac.yaml
// (root: the repository's top directory) as the administrator and waits
// until the CRDs serve.
func (s *Server) Install(t testing.TB, root string) dynamic.Interface {
	t.Helper()
	admin, err := dynamic.NewForConfig(s.Config("admin"))
	if err != nil {
		t.Fatal(err)
	}
	crds, _ := filepath.Glob(filepath.Join(root, "deploy/crds/*.yaml"))
	objs, err := ReadManifests(append(crds, filepath.Join(root, "deploy/rbac.yaml"))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := Apply(ctx, admin, objs); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, gvr := range []schema.GroupVersionResource{fleet.OverlaysGVR, fleet.HostsGVR} {
		for {
			_, err := admin.Resource(gvr).Namespace("sluice-system").List(ctx, metav1.ListOptions{})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not served: %v", gvr.Resource, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return admin
}

// RSS is the resident memory of the API server and of etcd, in bytes (0
// when unknown): what the scale measurements report of the server side.
func (s *Server) RSS() (api, etcd int64) {
	return s.api.rss(), s.etcd.rss()
}

func (p *proc) rss() int64 {
	if p == nil || p.cmd.Process == nil {
		return 0
	}
	b, err := fileread.ReadKernel(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid), fileread.ProcLimit)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
			var kb int64
			if _, err := fmt.Sscan(f[1], &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
