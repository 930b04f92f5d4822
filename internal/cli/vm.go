// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"sluice/internal/testlab"
)

func newVMCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "vm",
		Short: "Run commands in the test VM (qemu with a Debian 6.12 kernel)",
		Long: `Run commands in the test VM.

The host kernel lacks ESP, GCM, bonding, 802.1Q, geneve, tc flower, netdevsim
and loadable modules, so the tests that need them run in a qemu VM (software
emulation, no KVM) that boots the Debian kernel installed by "make setup".
The guest's root filesystem is the host's "/", shared read-only, with tmpfs
on /tmp, /run, /var/tmp, /root and a writable copy of /etc; the repository
is shared read-write at the same path. Commands run as root. Boot to the
first command takes about 4-5 seconds on an idle host (longer when the host's
CPUs are busy: everything is emulated).

SLUICE_VM_KERNEL=next boots the second test kernel instead (the newest Linux
in Debian trixie-backports, 7.3) over the Debian trixie root that
"make kernel-next" builds in /var/cache/sluice/next/root, which then is the
guest's "/"; modules are built there with the root's own toolchain.`,
	}
}

func newVMRunCmd() *cobra.Command {
	var f vmRunFlags
	cmd := &cobra.Command{
		Use:   "run [flags] -- command...",
		Short: "Boot the test VM, run one shell command in it, exit with its exit code",
		Long: `Boot the test VM, run one shell command in it and power it off.

The arguments are joined with spaces into one command for /bin/sh -c in the
guest, run as root in --dir (default: the repository root) with PATH, HOME,
SLUICE_IN_VM=1 and, when "sluice vm netdevsim" has built it, SLUICE_NETDEVSIM
set. Only the command's output (stdout and stderr, merged) is printed; kernel
messages are not. sluice exits with the command's exit code; a VM failure
(missing kernel, boot failure, timeout) exits 1 with an error. Put "--"
before the command so its flags are not taken as sluice's.`,
		Example: `  sluice vm run -- ip -d link show
  sluice vm run --timeout 2m -- 'modprobe bonding && ip link add b0 type bond'
  sluice vm run --dir test/vm -- ./vm.test -test.v`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runVMRun(cmd, f, args) },
	}
	fl := cmd.Flags()
	// Everything after the first argument is the command's, even without "--".
	fl.SetInterspersed(false)
	fl.DurationVar(&f.o.Timeout, "timeout", 10*time.Minute, "limit for the whole run, boot included; qemu is killed when it expires")
	fl.StringVar(&f.o.Kernel, "kernel", "", "vmlinuz to boot (default: newest /boot/vmlinuz-6.12*, else newest /boot/vmlinuz-*)")
	fl.IntVar(&f.o.CPUs, "cpus", 2, "number of virtual CPUs")
	fl.IntVar(&f.o.MemoryMB, "memory", 2048, "guest memory in MiB")
	fl.StringVar(&f.o.Share, "share", "", "host directory shared read-write at the same path in the guest (default: repository root, else current directory)")
	fl.StringVar(&f.o.Dir, "dir", "", "working directory of the command in the guest, absolute or relative to --share (default: --share)")
	fl.StringArrayVar(&f.o.Env, "env", nil, "extra NAME=value for the command's environment (repeatable)")
	fl.StringVar(&f.o.CacheDir, "cache-dir", "", "where the initramfs and netdevsim build are cached (default /var/cache/sluice/vm)")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "print the harness's progress and timings (boot time) to stderr")
	fl.BoolVar(&f.console, "console", false, "copy the raw serial console (kernel and init messages) to stderr, to debug a guest that does not boot")
	fl.StringVar(&f.o.KernelArgs, "kernel-args", "", "extra kernel command line, e.g. loglevel=7 (with --console) or initcall_debug")
	return exits(cmd, passthroughExit, "A command that ran in the VM: its own exit code.")
}

type vmRunFlags struct {
	o       testlab.Options
	verbose bool
	console bool
}

func runVMRun(cmd *cobra.Command, f vmRunFlags, args []string) error {
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	f.o.Stdout = cmd.OutOrStdout()
	if f.verbose {
		f.o.Log = cmd.ErrOrStderr()
	}
	if f.console {
		f.o.Console = cmd.ErrOrStderr()
	}
	code, err := testlab.Run(ctx, f.o, strings.Join(args, " "))
	if err != nil {
		return err
	}
	if code != 0 {
		return &ExitError{Code: code, Err: fmt.Errorf("command in VM exited %d", code)}
	}
	return nil
}

func newVMCheckCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Say whether the test VM can run here, and if not what is missing",
		Long: `Check that everything the test VM needs is installed: qemu-system-x86_64,
a kernel in /boot with its modules (9p), busybox-static and xz. Prints the
kernel that would boot, or what is missing with the fix.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runVMCheck(cmd.OutOrStdout()) },
	}
	return exits(cmd, ExitUnavailable, "the test VM cannot run here (the error says what is missing)")
}

func runVMCheck(w io.Writer) error {
	if err := testlab.Available(); err != nil {
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("test VM unavailable: %w", err)}
	}
	path, release, err := testlab.DefaultKernel()
	if err != nil {
		return &ExitError{Code: ExitUnavailable, Err: err}
	}
	fmt.Fprintf(w, "test VM available: kernel %s (%s)\n", path, release)
	return nil
}

// newVMModuleCmd declares a command that builds one kernel module for the
// VM kernel with build (cached) and prints its path: netdevsim, nicmodel.
func newVMModuleCmd(use, short, long string, build func(context.Context, testlab.Options) (string, error)) *cobra.Command {
	var o testlab.Options
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Log = io.Discard
			p, err := build(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), p)
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Kernel, "kernel", "", "vmlinuz the module is for (default: as for vm run)")
	cmd.Flags().StringVar(&o.CacheDir, "cache-dir", "", "cache directory (default /var/cache/sluice/vm)")
	return cmd
}

func newVMNetdevsimCmd() *cobra.Command {
	return newVMModuleCmd("netdevsim", "Build netdevsim.ko for the VM kernel (cached) and print its path",
		`Build netdevsim.ko for the VM kernel and print its path.

Debian kernels do not include netdevsim, the simulated NIC used to test
offload (IPsec crypto offload, SR-IOV, switchdev). This extracts its source
from /usr/src/linux-source-<series>.tar.xz and builds it against the kernel
headers, about 20 seconds the first time; later calls print the cached path.
Once built, "sluice vm run" passes the path to the guest as SLUICE_NETDEVSIM.`,
		testlab.NetdevsimModule)
}

func newVMNicmodelCmd() *cobra.Command {
	return newVMModuleCmd("nicmodel", "Build nicmodel.ko, the packet-offload NIC model, for the VM kernel (cached) and print its path",
		`Build nicmodel.ko for the VM kernel and print its path.

nicmodel (kmod/nicmodel in the source tree, embedded in this binary) is a
kernel module of sluice's own: pairs of Ethernet ports joined by a wire,
with native XDP and IPsec packet offload done in the "device" (ESP and
AES-GCM through the kernel crypto API). It lets the VM tests run what
otherwise needs a ConnectX-6 Dx or BlueField-3. It is built against the
kernel headers, about 10 seconds the first time, cached by kernel release
and source digest. Once built, "sluice vm run" passes the path to the guest
as SLUICE_NICMODEL.`,
		testlab.NicmodelModule)
}
