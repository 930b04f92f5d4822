// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sluice/internal/testlab"
)

// UpInVM runs 'sluice lab up' with spec s inside the test VM
// (internal/testlab), then command (default: lab status), then 'lab down',
// and returns the command's exit code; its output goes to stdout. A lab in
// the VM cannot outlive the VM, hence one command. The guest runs this
// binary (testlab.GuestBinary).
func UpInVM(ctx context.Context, s Spec, command []string, timeout time.Duration, asJSON bool, stdout io.Writer) (int, error) {
	if err := testlab.Available(); err != nil {
		return 0, fmt.Errorf("--vm: the test VM cannot run here: %w", err)
	}
	share, err := testlab.DefaultShare()
	if err != nil {
		return 0, err
	}
	bin, cleanup, err := testlab.GuestBinary(share)
	if err != nil {
		return 0, fmt.Errorf("--vm: %w", err)
	}
	defer cleanup()

	o := testlab.Options{Timeout: timeout, Stdout: stdout, Share: share}
	if s.Topology == GatewayModel {
		// Built on the host, cached; testlab.Run exports its path into
		// the guest as SLUICE_NICMODEL, where lab up inserts it.
		if _, err := testlab.NicmodelModule(ctx, o); err != nil {
			return 0, fmt.Errorf("--vm: building the NIC model: %w", err)
		}
	}
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

	if wd, err := os.Getwd(); err == nil && !testlab.HiddenInGuest(wd, share) {
		o.Dir = wd
	}
	return testlab.Run(ctx, o, script)
}
