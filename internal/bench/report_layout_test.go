// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// demoReport is what `make demo` writes: kernel, bare XDP and sluice over
// three rounds of a ramp of 1-second steps (--rate-max auto), with numbers
// of the shape this machine gives (docs/benchmarks.md): the kernel loses,
// sluice loses, and the generator falls short beside xdp-redirect. So the
// layout is tested on the labels, legends and ranges a user sees.
func demoReport(t testing.TB) *Report {
	t.Helper()
	prof, err := LoadProfile("imix-mno-1")
	if err != nil {
		t.Fatal(err)
	}
	ramp := Ramp{StartPPS: 500e3, Factor: 1.5, Refine: 4}
	rep := NewReport("compare", "sluice bench compare --topology forwarder --forwarders kernel,xdp-redirect,sluice --profile imix-mno-1 --rate-max auto --steps 12 --step-seconds 1 --rounds 3 --out bin/demo-report", "test",
		Settings{Profile: prof, Steps: 12, StepSeconds: 1, RateMax: Rate{Unit: "pps"}, Ramp: &ramp, LossThreshold: 0.1, GenCPUs: []int{0}})
	rep.Created = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	capPPS := map[string]float64{"kernel": 1.6e6, "xdp-redirect": 5e6, "sluice": 4.3e6}
	const genMax = 4.4e6
	for round := 1; round <= 3; round++ {
		order := []string{"kernel", "xdp-redirect", "sluice"}
		if round == 2 {
			order = []string{"sluice", "xdp-redirect", "kernel"}
		}
		for _, fw := range order {
			run := &RunResult{Label: fw, Round: round, Forwarder: fw, Topology: "forwarder", Tunnels: 1, Profile: prof.Name,
				RateMax: Rate{Unit: "pps"}, Ramp: &ramp, LossThreshold: 0.1}
			c := capPPS[fw] * (1 + 0.03*float64(round-2))
			for i := 1; ; i++ {
				target, ok := ramp.next(run.Steps, run.LossThreshold, 12)
				if !ok {
					break
				}
				sent := math.Min(target, genMax)
				rx := math.Min(sent, c)
				tx := uint64(sent)
				lost := uint64(sent - rx)
				lat := 8 + 30*rx/c
				if sent > c {
					lat = 400 + 300*float64(i)
				}
				run.Steps = append(run.Steps, Step{Index: i, StartS: float64(i - 1), DurationS: 1, TargetPPS: target,
					TxPackets: tx, RxPackets: tx - lost, Lost: lost, TxPPS: sent, RxPPS: rx, RxBPS: rx * 8 * 353,
					LossPct: 100 * float64(lost) / float64(tx), GenLimited: sent < 0.97*target,
					Latency: Latency{MinUs: lat / 2, MeanUs: lat, P50Us: lat, P99Us: lat * 3, P999Us: lat * 4, MaxUs: lat * 9}})
			}
			run.finish()
			rep.Runs = append(rep.Runs, run)
		}
	}
	return rep
}

// TestWriteDemoReport writes the demo report to SLUICE_REPORT_DIR for a look.
func TestWriteDemoReport(t *testing.T) {
	dir := os.Getenv("SLUICE_REPORT_DIR")
	if dir == "" {
		t.Skip("set SLUICE_REPORT_DIR to write the demo-shaped report there")
	}
	if err := demoReport(t).WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	fmt.Println(dir)
}

// TestReportLayoutInChromium renders the demo report's report.html in
// headless Chromium at the default window size and fails on text outside
// the page, labels clipped by their chart or overlapping each other, text
// inside a plotted area (legends go beside it) and a chart shown twice, all
// read from the DOM/SVG boxes (testdata/layout-check.js). It also takes a
// screenshot: SLUICE_REPORT_DIR=dir keeps it there for a look.
func TestReportLayoutInChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: run 'make setup' (scripts/setup.sh installs it)")
	}
	dir := os.Getenv("SLUICE_REPORT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := demoReport(t).WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("testdata/layout-check.js")
	if err != nil {
		t.Fatal(err)
	}
	checked := filepath.Join(t.TempDir(), "checked.html")
	withScript := strings.Replace(string(page), "</body>", "<script>"+string(script)+"</script>\n</body>", 1)
	if err := os.WriteFile(checked, []byte(withScript), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--no-first-run", "--hide-scrollbars", "--user-data-dir=" + t.TempDir(), "--window-size=1280,900",
		"--virtual-time-budget=10000"} // lets the embedded fonts load before the DOM is dumped
	dom, err := exec.Command(chromium, append(args, "--dump-dom", "file://"+checked)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	// the last one: the script's own comment names the element too
	all := regexp.MustCompile(`(?s)<pre id="layout-check">(\{.*?)</pre>`).FindAllSubmatch(dom, -1)
	if all == nil {
		t.Fatalf("the layout check did not run: no <pre id=\"layout-check\"> in the rendered page")
	}
	m := all[len(all)-1]
	var res struct {
		Charts, Texts int
		Problems      []string
	}
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &res); err != nil {
		t.Fatalf("layout check output: %v\n%s", err, m[1])
	}
	if res.Charts != 3 || res.Texts < 30 {
		t.Errorf("the page has %d charts with %d SVG texts, want the 3 charts with their labels", res.Charts, res.Texts)
	}
	for _, p := range res.Problems {
		t.Error(p)
	}
	shot := filepath.Join(dir, "report.png")
	if out, err := exec.Command(chromium, append(args, "--screenshot="+shot, "file://"+filepath.Join(dir, "report.html"))...).CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	if st, err := os.Stat(shot); err != nil || st.Size() < 20000 {
		t.Errorf("screenshot missing or blank (%v)", err)
	}
}

// TestChartPNGsHaveTheirLegends: render draws each figure twice (SVG, then
// PNG); a figure whose legend is moved out on the first draw came out of the
// second without one. Every PNG must have ink in its legend strip.
func TestChartPNGsHaveTheirLegends(t *testing.T) {
	charts, err := demoReport(t).Charts()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range charts {
		img, err := png.Decode(bytes.NewReader(c.PNG))
		if err != nil {
			t.Fatalf("%s.png: %v", c.Name, err)
		}
		b := img.Bounds()
		ink := 0
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Max.X - b.Dx()/6; x < b.Max.X; x++ { // the legend strip
				if r, g, bl, _ := img.At(x, y).RGBA(); r+g+bl < 3*0xe000 {
					ink++
				}
			}
		}
		if ink < 200 {
			t.Errorf("%s.png: %d dark pixels in the right-hand sixth, where the legend stands", c.Name, ink)
		}
	}
}
