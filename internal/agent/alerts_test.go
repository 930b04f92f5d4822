// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

// promtool is Prometheus's rule checker: Debian's package prometheus
// (scripts/setup.sh installs it); SLUICE_PROMTOOL names another.
func promtool(t *testing.T) string {
	if p := os.Getenv("SLUICE_PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool missing: make setup installs Debian's prometheus package")
		}
		t.Skip("promtool missing: make setup installs Debian's prometheus package (or set SLUICE_PROMTOOL)")
	}
	return p
}

// The shipped alerts (deploy/monitoring/prometheusrule.yaml) fire on the
// series they are written for and stay quiet otherwise: promtool runs
// their unit tests (prometheusrule_test.yaml). Every metric they name is
// one the agent exports, so a renamed metric cannot leave an alert that
// never fires.
func TestPrometheusRules(t *testing.T) {
	const dir = "../../deploy/monitoring"
	b, err := os.ReadFile(filepath.Join(dir, "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Groups []map[string]any `yaml:"groups"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &pr); err != nil {
		t.Fatal(err)
	}
	if pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
		t.Fatalf("prometheusrule.yaml: kind %q, %d groups", pr.Kind, len(pr.Spec.Groups))
	}
	exported := map[string]bool{}
	ch := make(chan *prometheus.Desc, 64)
	go func() { NewMetrics().Registry.Describe(ch); close(ch) }()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			exported[m[1]] = true
		}
	}
	used := regexp.MustCompile(`\bsluice_[a-z_]+\b`)
	for _, name := range used.FindAllString(string(b), -1) {
		if !exported[name] && !exported[strings.TrimSuffix(name, "_total")] {
			t.Errorf("prometheusrule.yaml uses %s, which the agent does not export", name)
		}
	}
	for _, name := range []string{"SluiceOffloadFellBack", "SluiceSAMissing", "SluicePairDown", "SluiceReconcileFailing"} {
		if !strings.Contains(string(b), "alert: "+name) {
			t.Errorf("prometheusrule.yaml has no alert %s", name)
		}
	}
	tool := promtool(t)
	work := t.TempDir()
	rules, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(dir, "prometheusrule_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"sluice.rules.yml": rules, "prometheusrule_test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(work, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(tool, "check", "rules", "sluice.rules.yml")
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	cmd = exec.Command(tool, "test", "rules", "prometheusrule_test.yaml")
	cmd.Dir = work
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
