// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sluice/internal/config"
)

var yamlBlockRE = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// Every host.yaml in docs/overlay.md (the schema and one example per
// seed) is a valid file.
func TestDocExamples(t *testing.T) {
	b, err := os.ReadFile("../../docs/overlay.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := yamlBlockRE.FindAllStringSubmatch(string(b), -1)
	if len(blocks) < 4 {
		t.Fatalf("found %d yaml blocks in docs/overlay.md, want the schema and three seeds", len(blocks))
	}
	for i, m := range blocks {
		name := "block " + strings.SplitN(m[1], "\n", 2)[0]
		if _, err := config.ParseHost([]byte(m[1]), "docs/overlay.md#"+name); err != nil {
			t.Errorf("yaml block %d of docs/overlay.md: %v", i+1, err)
		}
	}
}
