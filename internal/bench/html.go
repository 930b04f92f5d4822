// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"fmt"
	"html/template"
	"regexp"
	"strings"
)

// HTML renders report.html: one self-contained page (inline CSS and SVG,
// no script, nothing fetched) with the summary, every chart, and per run
// its settings and step table. Element ids the tests look for: summary,
// chart-NAME for each chart, run-N for each run (1-based).
func (r *Report) HTML(charts []Chart) ([]byte, error) {
	type chartView struct {
		Name, Title string
		SVG         template.HTML
	}
	type runView struct {
		N        int
		Run      *RunResult
		MaxClean *Step
	}
	var cv []chartView
	fonts := ""
	for _, c := range charts {
		if c.Name == ChartSummary {
			continue // the same three panels again: each chart once
		}
		svg := inlineSVG(c.SVG)
		// Every SVG embeds its fonts (charts.go); inline, one @font-face
		// serves the page, so later copies of the same one are dropped.
		if f := fontFace.FindString(svg); f != "" {
			if fonts == f {
				svg = strings.Replace(svg, f, "", 1)
			} else if fonts == "" {
				fonts = f
			}
		}
		cv = append(cv, chartView{Name: c.Name, Title: c.Title, SVG: template.HTML(svg)})
	}
	var rv []runView
	for i, run := range r.Runs {
		rv = append(rv, runView{N: i + 1, Run: run, MaxClean: run.MaxCleanStep()})
	}
	var buf bytes.Buffer
	err := reportTmpl.Execute(&buf, map[string]any{
		"R": r, "RefLabel": refLabel(r.Summaries()), "Charts": cv, "Runs": rv, "Summaries": r.Summaries(), "Shares": r.Settings.Profile.Shares(),
	})
	return buf.Bytes(), err
}

// refLabel names the reference of the ratios (the first line).
func refLabel(sums []Summary) string {
	if len(sums) == 0 {
		return ""
	}
	return "vs " + sums[0].Label
}

var fontFace = regexp.MustCompile(`(?s)<defs>\s*<style>\s*@font-face.*?</style>\s*</defs>`)

var xmlProlog = regexp.MustCompile(`(?s)^\s*<\?xml.*?\?>\s*(<!DOCTYPE[^>]*>\s*)?`)

// inlineSVG strips what an SVG file has and inline SVG must not.
func inlineSVG(b []byte) string {
	s := xmlProlog.ReplaceAllString(string(b), "")
	return strings.Replace(s, "<svg ", `<svg role="img" `, 1)
}

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"pps":  FormatPPS,
	"bps":  FormatBPS,
	"f1":   func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"f2":   func(v float64) string { return fmt.Sprintf("%.2f", v) },
	"f3":   func(v float64) string { return fmt.Sprintf("%.3f", v) },
	"pct":  func(v float64) string { return fmt.Sprintf("%.3f", v) },
	"pct1": func(v float64) string { return fmt.Sprintf("%.1f", 100*v) },
	"gbps": func(v float64) string { return fmt.Sprintf("%.3f", v/1e9) },
	"ratio": func(v float64) string {
		if v == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2fx", v)
	},
	"idx": func(shares []float64, i int) float64 {
		if i < len(shares) {
			return shares[i]
		}
		return 0
	},
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>sluice bench: {{.R.Settings.Profile.Name}} ({{.R.Kind}})</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: .85em; }
th, td { border: 1px solid #ddd; padding: .25em .5em; text-align: right; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
tr.clean td { background: #f1fbf1; } tr.maxclean td { background: #d6f5d6; font-weight: bold; }
tr.lossy td { background: #fff4f0; }
.note { background: #fffbe6; border-left: 4px solid #e6c200; padding: .5em 1em; }
figure { margin: 1em 0; } figure svg { width: 100%; height: auto; }
dl { display: grid; grid-template-columns: max-content auto; gap: .2em 1em; } dt { font-weight: bold; }
code { background: #f3f3f3; padding: 0 .2em; }
</style>
</head>
<body>
<h1>sluice bench — {{.R.Settings.Profile.Name}}{{if .R.Settings.Search}} ({{.R.Settings.Search}} search){{end}}</h1>
<p>{{.R.Created.Format "2006-01-02 15:04:05 UTC"}} on {{.R.Host.Hostname}}: kernel {{.R.Host.Kernel}}, {{.R.Host.CPUs}} CPUs ({{.R.Host.CPUModel}}), sluice {{.R.Version}}.<br>
Command: <code>{{.R.Command}}</code></p>
{{range .R.Notes}}<p class="note">{{.}}</p>{{end}}

<section id="summary">
<h2>Summary</h2>
<table>
<tr><th class="l">run</th><th>max clean rate</th><th>max clean Gbps (L2)</th><th>p99 at max clean</th><th>peak received</th><th>vs {{with index .Summaries 0}}{{.Label}}{{end}}</th><th class="l">limit</th></tr>
{{range .Summaries}}<tr><td class="l">{{.Label}}</td><td>{{pps .MaxCleanPPS}}</td><td>{{gbps .MaxCleanBPS}}</td><td>{{f1 .P99AtClean}} µs</td><td>{{pps .PeakRxPPS}}</td><td>{{ratio .RatioToFirst}}{{if and (gt .Rounds 1) (gt .RatioMax .RatioMin)}} ({{f2 .RatioMin}}-{{f2 .RatioMax}}){{end}}{{if .RatioNote}}*{{end}}</td><td class="l">{{.LimitText}}</td></tr>
{{end}}</table>
{{range .Summaries}}{{if .RatioNote}}<p class="ratio-note">* the ratio {{.Label}} {{$.RefLabel}} was {{.RatioNote}}: where the generator (or the load's top) set a number, it is not that forwarder's ceiling.</p>{{end}}{{end}}
<p id="limits">What set each run's max-clean rate (the limit column):</p>
<ul>
{{range .Runs}}<li>{{if .Run.Round}}round {{.Run.Round}}, {{.Run.Forwarder}}{{else}}{{.Run.Label}}{{end}}: {{with .Run.Ceiling}}{{.Text}}{{else}}no steps{{end}}</li>
{{end}}</ul>
{{with index .Summaries 0}}{{if gt .Rounds 1}}<p>Medians of {{.Rounds}} rounds (every other round in reverse order); the ratio is the median of the per-round ratios, their range in brackets.</p>{{end}}{{end}}
<p>A step is clean when its loss is at most {{.R.Settings.LossThreshold}}%; the max-clean rate is the highest received rate of a clean step.
Rates in bits count Ethernet frames with their 4-byte FCS (L2), without preamble and inter-frame gap.</p>
</section>

<section id="charts">
<h2>Charts</h2>
{{range .Charts}}<figure id="chart-{{.Name}}" aria-label="{{.Title}}">
{{.SVG}}
</figure>
{{end}}</section>

<section id="settings">
<h2>Load</h2>
<dl>
<dt>profile</dt><dd>{{.R.Settings.Profile.Name}}: {{.R.Settings.Profile.Description}} (sizes {{if eq .R.Settings.Profile.FCS "included"}}include{{else}}exclude{{end}} the FCS; source {{.R.Settings.Profile.Source}})</dd>
{{with .R.Settings.Ramp}}<dt>steps</dt><dd>a ramp of {{$.R.Settings.StepSeconds}} s steps: from {{pps .StartPPS}}, ×{{.Factor}} per step (at most {{$.R.Settings.Steps}} steps) until a step loses more than {{$.R.Settings.LossThreshold}}% or the generator falls short, then {{.Refine}} trials between the last rate that passed and the first that failed</dd>
{{else}}<dt>steps</dt><dd>{{.R.Settings.Steps}} × {{.R.Settings.StepSeconds}} s, up to {{.R.Settings.RateMax}}</dd>{{end}}
<dt>generator CPUs</dt><dd>{{.R.Settings.GenCPUs}}</dd>
<dt>flows</dt><dd>sources {{.R.Settings.Profile.Flows.Src}} + {{.R.Settings.Profile.Flows.SrcCount}}, {{.R.Settings.Profile.Flows.DstHosts}} host(s) behind every tunnel, source ports {{.R.Settings.Profile.Flows.SPort}} + {{.R.Settings.Profile.Flows.SPortCount}}, destination ports {{.R.Settings.Profile.Flows.DPort}} + {{.R.Settings.Profile.Flows.DPortCount}}</dd>
</dl>
<table><tr><th>size</th><th>frame on veth</th><th>share of packets</th></tr>
{{$p := .R.Settings.Profile}}{{$sh := .Shares}}{{range $i, $s := $p.Streams}}<tr><td>{{$s.Size}}</td><td>{{$p.FrameLen $s}}</td><td>{{pct1 (idx $sh $i)}}%</td></tr>
{{end}}</table>
</section>

{{range .Runs}}<section id="run-{{.N}}" class="run">
<h2>Run {{.N}}: {{.Run.Label}}</h2>
<p>Forwarder <b>{{.Run.Forwarder}}</b>, topology {{.Run.Topology}}, {{.Run.Tunnels}} tunnel(s).
Sent {{.Run.TotalTx}}, received {{.Run.TotalRx}}, lost {{.Run.TotalLost}} frames.
{{with .MaxClean}}Max clean: step {{.Index}}, {{pps .RxPPS}} ({{gbps .RxBPS}} Gbps), p99 {{f1 .Latency.P99Us}} µs.{{else}}No step was clean.{{end}}
{{with .Run.Ceiling}}<b class="limit">{{.Text}}.</b>{{end}}
{{with .Run.Search}}Search: {{.Kind}} = {{pps .RatePPS}} after {{.Trials}} trials (resolution {{pps .ResolutionPPS}}).{{end}}</p>
<table>
<tr><th>step</th><th>target</th><th>sent</th><th>received</th><th>Gbps rx</th><th>lost</th><th>loss %</th><th>late</th><th>p50 µs</th><th>p99 µs</th><th>p99.9 µs</th><th>max µs</th><th>kernel fwd</th></tr>
{{$mc := .Run.MaxClean}}{{range .Run.Steps}}<tr class="{{if eq .Index $mc}}maxclean{{else if .Clean}}clean{{else}}lossy{{end}}"><td>{{.Index}}</td><td>{{pps .TargetPPS}}</td><td>{{pps .TxPPS}}{{if .GenLimited}}*{{end}}</td><td>{{pps .RxPPS}}</td><td>{{gbps .RxBPS}}</td><td>{{.Lost}}</td><td>{{pct .LossPct}}</td><td>{{.Late}}</td><td>{{f1 .Latency.P50Us}}</td><td>{{f1 .Latency.P99Us}}</td><td>{{f1 .Latency.P999Us}}</td><td>{{f1 .Latency.MaxUs}}</td><td>{{.KernelForwarded}}</td></tr>
{{end}}</table>
<p>* the generator sent less than 97% of the target: the path pushed back (on one CPU the generator, the forwarder and the sink take turns).</p>
</section>
{{end}}
</body>
</html>
`))
