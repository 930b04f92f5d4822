// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// RekeyEvent is one rekey and the datagrams sent in its window (the
// interval centred on it).
type RekeyEvent struct {
	N int `json:"n"`
	// At is when the rekey was triggered (or seen), seconds from start.
	At         float64 `json:"at_seconds"`
	Sent       int     `json:"sent"`
	Received   int     `json:"received"`
	Lost       int     `json:"lost"`
	Duplicated int     `json:"duplicated"`
	Reordered  int     `json:"reordered"`
	// LongestGapMS is the longest run of lost datagrams, in ms of
	// sending time.
	LongestGapMS float64 `json:"longest_gap_ms"`
	Error        string  `json:"error,omitempty"`
	// Drops are the drop counters of A and B (xfrm_stat, snmp Ip/Udp,
	// per device, the receiver's socket) that rose during the window, and
	// "A send ERRNO" for datagrams A's kernel refused.
	Drops map[string]uint64 `json:"drop_counters,omitempty"`
	// Cause of the window's losses: IPsec, outside IPsec, send error, or
	// no counter rose.
	Cause string `json:"cause,omitempty"`
}

// RekeyReport is the result of one rekey run.
type RekeyReport struct {
	Kind     string    `json:"kind"` // "rekey"
	Label    string    `json:"label"`
	Mode     string    `json:"mode"`
	Command  string    `json:"command"`
	Started  time.Time `json:"started"`
	Duration float64   `json:"duration_seconds"`
	Charon   string    `json:"charon,omitempty"`
	Kernel   string    `json:"kernel,omitempty"`
	Rate     int       `json:"rate_pps"`
	// AchievedRate is what the sender managed (a slow guest falls behind).
	AchievedRate float64      `json:"achieved_pps"`
	Interval     float64      `json:"interval_seconds"`
	IKEDelay     float64      `json:"ike_delay_ms,omitempty"`
	Events       []RekeyEvent `json:"rekeys"`
	// ReceiveBuffer is the receiver's socket buffer (bytes) the kernel
	// granted.
	ReceiveBuffer int `json:"receive_buffer_bytes,omitempty"`
	// Drops are the drop counters that rose during the whole run, and
	// LostBy the lost datagrams by cause.
	Drops  map[string]uint64 `json:"drop_counters,omitempty"`
	LostBy map[string]int    `json:"lost_by_cause,omitempty"`
	// Totals over all rekeys (and Outside: datagrams sent outside every
	// window, which the first and last half-intervals hold).
	Total RekeyEvent `json:"total"`
}

func newRekeyReport(o RekeyOptions) *RekeyReport {
	return &RekeyReport{Kind: "rekey", Label: o.Label, Mode: o.Mode, Started: time.Now().UTC(), Rate: o.Rate,
		Interval: o.Interval.Seconds(), IKEDelay: float64(o.IKEDelay.Milliseconds())}
}

// account counts, per rekey window, lost (sent, never received),
// duplicated (received more than once) and reordered (received after a
// later sequence number) datagrams.
func (r *RekeyReport) account(events []RekeyEvent, sentAt []time.Duration, arrivals []uint64, interval time.Duration) {
	count := make([]int, len(sentAt))
	reord := make([]bool, len(sentAt))
	var maxSeen uint64
	for i, s := range arrivals {
		if s >= uint64(len(sentAt)) {
			continue
		}
		count[s]++
		if i > 0 && s < maxSeen && count[s] == 1 {
			reord[s] = true
		}
		maxSeen = max(maxSeen, s)
	}
	window := func(e RekeyEvent) (time.Duration, time.Duration) {
		at := time.Duration(e.At * float64(time.Second))
		return at - interval/2, at + interval/2
	}
	for _, e := range events {
		lo, hi := window(e)
		var gap, longest time.Duration
		var gapStart time.Duration
		for s, t := range sentAt {
			if t < lo || t >= hi {
				continue
			}
			e.Sent++
			switch c := count[s]; {
			case c == 0:
				e.Lost++
				if gap == 0 {
					gapStart = t
				}
				gap = t - gapStart + time.Second/time.Duration(max(r.Rate, 1))
				longest = max(longest, gap)
				continue
			case c > 1:
				e.Duplicated += c - 1
			}
			gap = 0
			e.Received++
			if reord[s] {
				e.Reordered++
			}
		}
		e.LongestGapMS = float64(longest.Microseconds()) / 1000
		r.Events = append(r.Events, e)
		r.Total.Sent += e.Sent
		r.Total.Received += e.Received
		r.Total.Lost += e.Lost
		r.Total.Duplicated += e.Duplicated
		r.Total.Reordered += e.Reordered
		r.Total.LongestGapMS = max(r.Total.LongestGapMS, e.LongestGapMS)
		if e.Error != "" {
			r.Total.N++ // counts failed triggers
		}
	}
}

// explain attributes the drop counters to the windows: samples[i] and
// samples[i+1] bound rekey i's window (one sample per boundary; the
// lifetime mode has only the first and last), and each window with a loss
// gets its cause.
func (r *RekeyReport) explain(samples []map[string]uint64, sendErrs map[uint64]string, sentAt []time.Duration, interval time.Duration) {
	if len(samples) >= 2 {
		r.Drops = counterDelta(samples[0], samples[len(samples)-1])
	}
	perWindow := len(samples) == len(r.Events)+1
	add := func(m *map[string]uint64, k string) {
		if *m == nil {
			*m = map[string]uint64{}
		}
		(*m)[k]++
	}
	sendIn := make([]int, len(r.Events))
	for seq, name := range sendErrs {
		add(&r.Drops, "A send "+name)
		for i, e := range r.Events {
			at := time.Duration(e.At * float64(time.Second))
			if t := sentAt[seq]; t >= at-interval/2 && t < at+interval/2 {
				add(&r.Events[i].Drops, "A send "+name)
				sendIn[i]++
			}
		}
	}
	for i := range r.Events {
		e := &r.Events[i]
		if perWindow {
			for k, v := range counterDelta(samples[i], samples[i+1]) {
				if e.Drops == nil {
					e.Drops = map[string]uint64{}
				}
				e.Drops[k] += v
			}
		}
		if e.Lost == 0 {
			continue
		}
		drops := e.Drops
		if !perWindow {
			drops = r.Drops
		}
		e.Cause = causeOf(sendIn[i], drops)
		if r.LostBy == nil {
			r.LostBy = map[string]int{}
		}
		r.LostBy[e.Cause] += e.Lost
	}
}

// WriteTable prints the per-rekey table and the totals.
func (r *RekeyReport) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "rekey\tat (s)\tsent\treceived\tlost\tdup\treordered\tlongest gap (ms)\t drop counters that rose\n")
	for _, e := range r.Events {
		note := strings.Join(slices.DeleteFunc([]string{e.Cause, formatCounters(e.Drops), e.Error}, func(s string) bool { return s == "" }), "; ")
		if e.Cause != "" {
			note = "lost: " + note
		}
		fmt.Fprintf(tw, "%d\t%.2f\t%d\t%d\t%d\t%d\t%d\t%.1f\t %s\n", e.N, e.At, e.Sent, e.Received, e.Lost, e.Duplicated, e.Reordered, e.LongestGapMS, note)
	}
	t := r.Total
	fmt.Fprintf(tw, "all %d\t\t%d\t%d\t%d\t%d\t%d\t%.1f\t\n", len(r.Events), t.Sent, t.Received, t.Lost, t.Duplicated, t.Reordered, t.LongestGapMS)
	tw.Flush()
	fmt.Fprintf(w, "%s (%s, %d pps (achieved %.0f), a rekey every %.1f s%s): %d lost, %d duplicated, %d reordered over %d rekeys",
		r.Label, r.Mode, r.Rate, r.AchievedRate, r.Interval, ikeDelayNote(r.IKEDelay), t.Lost, t.Duplicated, t.Reordered, len(r.Events))
	if t.N > 0 {
		fmt.Fprintf(w, "; %d rekey trigger(s) failed", t.N)
	}
	fmt.Fprintln(w)
	if r.ReceiveBuffer > 0 {
		fmt.Fprintf(w, "receiver socket buffer: %d bytes\n", r.ReceiveBuffer)
	}
	if len(r.LostBy) > 0 {
		causes := make([]string, 0, len(r.LostBy))
		for c, n := range r.LostBy {
			causes = append(causes, fmt.Sprintf("%d %s", n, c))
		}
		slices.Sort(causes)
		fmt.Fprintf(w, "lost by cause: %s\n", strings.Join(causes, ", "))
	}
	if len(r.Drops) > 0 {
		fmt.Fprintf(w, "drop counters that rose during the run: %s\n", formatCounters(r.Drops))
	} else {
		fmt.Fprintln(w, "drop counters that rose during the run: none (xfrm_stat, Ip/Udp errors, device drops, socket drops, softnet)")
	}
}

func ikeDelayNote(ms float64) string {
	if ms == 0 {
		return ""
	}
	return fmt.Sprintf(", IKE delayed %.0f ms", ms)
}

// Chart is the lost/duplicated/reordered datagrams per rekey.
func (r *RekeyReport) Chart() (Chart, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Datagrams per rekey: %s (%s)", r.Label, r.Mode)
	p.X.Label.Text = "rekey"
	p.Y.Label.Text = "datagrams"
	p.Y.Min = 0
	series := []struct {
		name string
		v    func(RekeyEvent) int
	}{{"lost", func(e RekeyEvent) int { return e.Lost }}, {"duplicated", func(e RekeyEvent) int { return e.Duplicated }}, {"reordered", func(e RekeyEvent) int { return e.Reordered }}}
	w := vg.Points(max(1, 300/float64(max(len(r.Events), 1))))
	for i, s := range series {
		vals := make(plotter.Values, len(r.Events))
		for j, e := range r.Events {
			vals[j] = float64(s.v(e))
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return Chart{}, err
		}
		b.Color = runColor(i)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(i-1)
		p.Add(b)
		p.Legend.Add(s.name, b)
	}
	p.Y.Max = max(p.Y.Max, 1)
	p.Legend.TextStyle.Font.Size, p.Legend.Padding = vg.Points(9), vg.Points(4) // as newPlot
	// the legend beside the bars, not over them (charts.go)
	return render("rekey", p.Title.Text, chartW, chartH, legendRight(p).draw)
}

// WriteDir writes rekey.json, rekey.txt (the table), rekey.svg/png and
// report.html into dir.
func (r *RekeyReport) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	var table bytes.Buffer
	r.WriteTable(&table)
	c, err := r.Chart()
	if err != nil {
		return err
	}
	var page bytes.Buffer
	if err := rekeyTmpl.Execute(&page, map[string]any{"R": r, "Table": table.String(), "SVG": template.HTML(inlineSVG(c.SVG))}); err != nil {
		return err
	}
	for name, b := range map[string][]byte{"rekey.json": append(j, '\n'), "rekey.txt": table.Bytes(), "rekey.svg": c.SVG, "rekey.png": c.PNG, "report.html": page.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

var rekeyTmpl = template.Must(template.New("rekey").Funcs(template.FuncMap{"join": strings.Join}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>sluice bench rekey: {{.R.Label}}</title>
<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}pre{background:#f6f6f6;padding:1em}</style></head>
<body>
<h1>Rekey without a lost packet? {{.R.Label}} ({{.R.Mode}})</h1>
<p id="summary">{{len .R.Events}} rekeys, {{.R.Rate}} datagrams/s, a rekey every {{.R.Interval}} s{{if .R.IKEDelay}}, IKE delayed {{.R.IKEDelay}} ms{{end}}:
<b>{{.R.Total.Lost}} lost</b>, {{.R.Total.Duplicated}} duplicated, {{.R.Total.Reordered}} reordered. {{.R.Charon}}, Linux {{.R.Kernel}}; started {{.R.Started}}.</p>
<figure id="chart-rekey">{{.SVG}}</figure>
<h2>Per rekey</h2>
<pre id="table">{{.Table}}</pre>
<p>Command: <code>{{.R.Command}}</code></p>
</body></html>
`))
