// SPDX-License-Identifier: Apache-2.0

package xfrm

// nlAttr builds one netlink attribute, for tests that extend kernel bytes.
func nlAttr(typ uint16, v []byte) []byte { return putAttr(nil, typ, v) }
