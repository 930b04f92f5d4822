// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"reflect"
	"strconv"
	"time"
)

// The defaults other code names (the gateway's PID file beside the
// default pin dir, messages, the 0-means-default numbers) are read from
// the keys' `default:` tags: a default is written once, on its key.
var (
	DefaultPinDir    = tagDefault[gatewayFile]("PinDir")
	DefaultLease     = tagDuration[gatewayFile]("Lease")
	DefaultAPISocket = tagDefault[gatewayFile]("APISocket") // where the daemon's API listens
	// DefaultTopPolicies policies get their own metric labels.
	DefaultTopPolicies = tagInt[gatewayFile]("MetricsTopPolicies")
	// DefaultFlowerInboundChain is the post-decrypt chain fastSwan's mlx5
	// patches use.
	DefaultFlowerInboundChain = uint32(tagInt[gatewayFile]("FlowerInboundChain"))
	DefaultFlowerRuleBudget   = tagInt[gatewayInterface]("FlowerRuleBudget")

	// DefaultVICI is charon's own socket.
	DefaultVICI           = tagDefault[ikeFile]("VICI")
	DefaultGuestMemoryMiB = tagInt[hostGuest]("MemoryMiB")
)

// tagDefault is the default: tag of field of file struct F. A field
// without one is a bug caught as soon as the package loads.
func tagDefault[F any](field string) string {
	f, ok := reflect.TypeFor[F]().FieldByName(field)
	d := f.Tag.Get("default")
	if !ok || d == "" {
		panic(fmt.Sprintf("config: %T.%s has no default: tag", *new(F), field))
	}
	return d
}

func tagInt[F any](field string) int {
	n, err := strconv.Atoi(tagDefault[F](field))
	if err != nil {
		panic(fmt.Sprintf("config: %T.%s: default: %v", *new(F), field, err))
	}
	return n
}

func tagDuration[F any](field string) time.Duration {
	d, err := time.ParseDuration(tagDefault[F](field))
	if err != nil {
		panic(fmt.Sprintf("config: %T.%s: default: %v", *new(F), field, err))
	}
	return d
}
