package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"sluice/internal/lab"
	"sluice/internal/testlab"
)

// labUpInVM runs 'lab up' with the same spec inside the test VM, then
// command (default: lab status), then 'lab down', and passes the command's
// exit code back. A lab in the VM cannot outlive the VM, hence one command.
func labUpInVM(cmd *cobra.Command, s lab.Spec, command []string, timeout time.Duration, asJSON bool) error {
	if err := testlab.Available(); err != nil {
		return fmt.Errorf("--vm: the test VM cannot run here: %w", err)
	}
	share, err := testlab.DefaultShare()
	if err != nil {
		return err
	}
	bin, cleanup, err := guestSluice(share)
	if err != nil {
		return fmt.Errorf("--vm: %w", err)
	}
	defer cleanup()

	q := testlab.ShellQuote
	up := []string{"sluice", "lab", "up", q(s.Topology), "--name", q(s.Name), "--tunnels", strconv.Itoa(s.Tunnels), "--forwarder", q(s.Forwarder)}
	if s.Opts.DropEvery > 0 {
		up = append(up, "--drop-every", strconv.FormatUint(uint64(s.Opts.DropEvery), 10))
	}
	if s.Opts.RatePPS > 0 {
		up = append(up, "--rate-limit", strconv.FormatUint(s.Opts.RatePPS, 10)+"pps")
	}
	if asJSON {
		up = append(up, "--json")
	}
	inner := "sluice lab status " + q(s.Name)
	if len(command) > 0 {
		inner = strings.Join(command, " ")
	}
	script := fmt.Sprintf("export PATH=%s:$PATH\n%s || exit $?\n( %s )\nrc=$?\nsluice lab down %s >/dev/null || [ $rc -ne 0 ] || rc=1\nexit $rc\n",
		q(filepath.Dir(bin)), strings.Join(up, " "), inner, q(s.Name))

	o := testlab.Options{Timeout: timeout, Stdout: cmd.OutOrStdout(), Share: share}
	if wd, err := os.Getwd(); err == nil && !testlab.HiddenInGuest(wd, share) {
		o.Dir = wd
	}
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	code, err := testlab.Run(ctx, o, script)
	if err != nil {
		return err
	}
	if code != 0 {
		return &ExitError{Code: code, Err: fmt.Errorf("in the test VM: exit %d", code)}
	}
	return nil
}

// guestSluice returns a path where the guest finds this binary, named
// "sluice": the binary itself, or a copy in the VM cache when the guest's
// tmpfs hides it (a binary in /tmp, as 'go run' and tests make).
func guestSluice(share string) (string, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return "", nil, err
	}
	if !testlab.HiddenInGuest(exe, share) && filepath.Base(exe) == "sluice" {
		return exe, func() {}, nil
	}
	if err := os.MkdirAll(testlab.DefaultCacheDir, 0o755); err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp(testlab.DefaultCacheDir, "bin-")
	if err != nil {
		return "", nil, fmt.Errorf("a copy of %s for the guest: %w", exe, err)
	}
	cleanup := func() { os.RemoveAll(dir) }
	if err := copyExecutable(exe, filepath.Join(dir, "sluice")); err != nil {
		cleanup()
		return "", nil, err
	}
	return filepath.Join(dir, "sluice"), cleanup, nil
}

func copyExecutable(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}
