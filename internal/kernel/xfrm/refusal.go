// SPDX-License-Identifier: Apache-2.0

package xfrm

import "fmt"

// FastPathRefusal says why a forwarder that hands cleartext to a
// packet-offload device must not send a policy of direction dir through
// s, or "" when nothing in s forbids it. Each reason is something the
// kernel decides per packet and a mirror cannot (fail closed: the kernel
// keeps that traffic):
//   - IP-TFS (XFRM_MODE_IPTFS, Linux 6.14) aggregates and fragments inner
//     packets into fixed-size ESP payloads: not plain ESP tunnel mode.
//   - A per-CPU SA (XFRMA_SA_PCPU, Linux 6.13) is one of a set the kernel
//     chooses from by the sending CPU (xfrm_state_find); picking one of the
//     set, or leaving the choice to the NIC, is a guess.
//   - An SA whose XFRMA_SA_DIR is the other way than the policy's: the
//     kernel drops outbound packets through an "in" SA (xfrm_output) and
//     inbound ones through an "out" SA (xfrm_input).
func (s *State) FastPathRefusal(dir Dir) string {
	switch {
	case s.Mode == ModeIPTFS:
		return fmt.Sprintf("SA spi %#x to %s is IP-TFS (mode iptfs): not plain ESP tunnel mode", s.SPI, s.Dst)
	case s.PerCPU:
		return fmt.Sprintf("SA spi %#x to %s is per-CPU (cpu %d): the kernel picks the SA by the sending CPU", s.SPI, s.Dst, s.CPU)
	case s.Dir == SADirIn && dir == DirOut, s.Dir == SADirOut && dir != DirOut:
		return fmt.Sprintf("SA spi %#x to %s has direction %s, the policy is %s: the kernel would drop it", s.SPI, s.Dst, s.Dir, dir)
	}
	return ""
}
