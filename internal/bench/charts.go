// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Chart is one figure, rendered as SVG and PNG.
type Chart struct {
	Name  string // file name without extension
	Title string
	SVG   []byte
	PNG   []byte
}

// The figures, in the trex-runner layout: received rate as a staircase
// over time, latency on a log axis, loss; every run overlaid in its own
// colour, the max-clean step of each run annotated.
const (
	ChartThroughput = "throughput"
	ChartLatency    = "latency"
	ChartLoss       = "loss"
	ChartSummary    = "summary" // the three stacked
)

// ChartNames lists the charts every report has.
var ChartNames = []string{ChartSummary, ChartThroughput, ChartLatency, ChartLoss}

const (
	chartW = 9 * vg.Inch
	chartH = 3.3 * vg.Inch
	dpi    = 110
)

// Charts renders the report's figures. The summary stacks the three
// panels for a single image file; report.html shows the three panels once
// each, not the summary too.
func (r *Report) Charts() ([]Chart, error) {
	build := map[string]func() (*plot.Plot, error){
		ChartThroughput: r.throughputPlot,
		ChartLatency:    r.latencyPlot,
		ChartLoss:       r.lossPlot,
	}
	var out []Chart
	var splits []legendSplit
	var panels []*plot.Plot
	w := vg.Length(0) // one legend width for all, so the time axes line up down the page
	for _, name := range []string{ChartThroughput, ChartLatency, ChartLoss} {
		p, err := build[name]()
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", name, err)
		}
		sp := legendRight(p)
		sp.name = name
		splits = append(splits, sp)
		w = max(w, splits[len(splits)-1].width)
		// Each panel is built afresh: a plot.Plot keeps state from drawing.
		fresh, _ := build[name]()
		panels = append(panels, fresh)
	}
	for _, sp := range splits {
		sp.width = w
		c, err := render(sp.name, sp.p.Title.Text, chartW, chartH, sp.draw)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	title := "Stepped load: " + r.Settings.Profile.Name
	// Split once: render draws twice (SVG, PNG), and a split empties p.Legend.
	var split []legendSplit
	for _, p := range panels {
		split = append(split, legendRight(p))
	}
	summary, err := render(ChartSummary, title, chartW, 3*chartH, func(dc draw.Canvas) {
		tiles := draw.Tiles{Rows: 3, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(10)}
		canvases := plot.Align([][]*plot.Plot{{panels[0]}, {panels[1]}, {panels[2]}}, tiles, draw.Crop(dc, 0, -w-legendGap, 0, 0))
		for i, sp := range split {
			sp.drawIn(canvases[i][0], dc.Max.X)
		}
	})
	if err != nil {
		return nil, err
	}
	return append([]Chart{summary}, out...), nil
}

// The legend stands right of the plotted area, top-aligned with it: inside,
// it covered the top tick label and the data it describes.
const (
	legendGap = 10 // points between the plot's right edge and the legend
	rightPad  = 6  // points right of the legend, so no glyph touches the edge
)

// legendSplit is a plot with its legend taken out, to be drawn beside it.
type legendSplit struct {
	name  string
	p     *plot.Plot
	leg   plot.Legend
	width vg.Length
}

func legendRight(p *plot.Plot) legendSplit {
	leg := p.Legend
	p.Legend = plot.NewLegend()
	leg.Top, leg.Left = true, true
	r := leg.Rectangle(draw.Canvas{})
	return legendSplit{p: p, leg: leg, width: r.Max.X - r.Min.X + rightPad}
}

// draw draws the plot in c less a strip on the right, and the legend there.
func (s legendSplit) draw(c draw.Canvas) {
	s.drawIn(draw.Crop(c, 0, -s.width-legendGap, 0, 0), c.Max.X)
}

// drawIn draws the plot in pc and the legend between pc's right edge and right.
func (s legendSplit) drawIn(pc draw.Canvas, right vg.Length) {
	s.p.Draw(pc)
	da := s.p.DataCanvas(pc)
	lc := pc
	lc.Min.X, lc.Max.X = pc.Max.X+legendGap, right-rightPad
	lc.Max.Y = da.Max.Y
	s.leg.Draw(lc)
}

// margin keeps every glyph off the image's edge: a browser's text box is
// taller than gonum's, and titles drawn flush with the top were cut.
const margin = 4

func render(name, title string, w, h vg.Length, drawFn func(draw.Canvas)) (Chart, error) {
	c := Chart{Name: name, Title: title}
	inset := func(vc vg.CanvasSizer) {
		dc := draw.New(vc)
		dc.SetColor(color.White)
		dc.Fill(dc.Rectangle.Path())
		drawFn(draw.Crop(dc, margin, -margin, margin, -margin))
	}
	// The fonts travel with the SVG: a browser without Liberation fell back to
	// a wider font, and the right-hand tick labels were cut off.
	sc := vgsvg.NewWith(vgsvg.UseWH(w, h), vgsvg.EmbedFonts(true))
	inset(sc)
	var sb bytes.Buffer
	if _, err := sc.WriteTo(&sb); err != nil {
		return c, err
	}
	c.SVG = sb.Bytes()
	ic := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi))
	inset(ic)
	var pb bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: ic}).WriteTo(&pb); err != nil {
		return c, err
	}
	c.PNG = pb.Bytes()
	return c, nil
}

func runColor(i int) color.Color { return plotutil.Color(i) }

// runLook is how one run is drawn.
type runLook struct {
	col    color.Color
	legend string // "" when an earlier run already stands for it in the legend
	label  string // max-clean annotation prefix; "" for none
}

// looks gives every run its look. With rounds (compare --rounds), all rounds
// of a forwarder share its colour and one legend entry, and only the round
// whose max-clean rate is the forwarder's median is annotated, as in the
// summary: nine labelled lines in seven colours said nothing.
func (r *Report) looks() []runLook {
	out := make([]runLook, len(r.Runs))
	groups := map[string][]int{}
	var order []string
	for i, run := range r.Runs {
		if run.Round == 0 {
			out[i] = runLook{col: runColor(i), legend: run.Label, label: "max clean"}
			continue
		}
		if groups[run.Forwarder] == nil {
			order = append(order, run.Forwarder)
		}
		groups[run.Forwarder] = append(groups[run.Forwarder], i)
	}
	for g, fw := range order {
		idx := groups[fw]
		byRate := slices.Clone(idx)
		slices.SortStableFunc(byRate, func(a, b int) int { return cmp.Compare(maxCleanPPS(r.Runs[a]), maxCleanPPS(r.Runs[b])) })
		median := byRate[(len(byRate)-1)/2]
		for k, i := range idx {
			out[i].col = runColor(g)
			if k == 0 {
				out[i].legend = fmt.Sprintf("%s (%d rounds)", fw, len(idx))
			}
			if i == median {
				out[i].label = fw + " median max clean"
			}
		}
	}
	return out
}

func newPlot(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = ylabel
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Legend.Padding = vg.Points(4) // gonum spaces entries by cap height: less and the lines' boxes overlap
	p.Add(plotter.NewGrid())
	return p
}

// staircase turns per-step values into flat segments over each step.
func staircase(steps []Step, v func(Step) float64, skip func(float64) bool) plotter.XYs {
	var xy plotter.XYs
	for _, s := range steps {
		y := v(s)
		if skip != nil && skip(y) {
			continue
		}
		xy = append(xy, plotter.XY{X: s.StartS, Y: y}, plotter.XY{X: s.StartS + s.DurationS, Y: y})
	}
	return xy
}

// rateScale picks Mpps or kpps for the y axis.
func (r *Report) rateScale() (float64, string) {
	peak := 0.0
	for _, run := range r.Runs {
		for _, s := range run.Steps {
			peak = max(peak, s.TargetPPS, s.TxPPS, s.RxPPS)
		}
	}
	if peak >= 1e6 {
		return 1e6, "Mpps"
	}
	return 1e3, "kpps"
}

func (r *Report) throughputPlot() (*plot.Plot, error) {
	scale, unit := r.rateScale()
	p := newPlot("Received rate per step (dashed: offered)", "received ("+unit+")")
	p.Y.Min = 0
	looks := r.looks()
	// The max-clean value goes into the legend under its run, not beside its
	// marker: labels at neighbouring markers overlapped each other and the lines.
	type entry struct {
		name  string
		thumb plot.Thumbnailer
		note  string
	}
	var entries []*entry
	group := map[string]*entry{}
	for i, run := range r.Runs {
		col := looks[i].col
		rx, err := plotter.NewLine(staircase(run.Steps, func(s Step) float64 { return s.RxPPS / scale }, nil))
		if err != nil {
			return nil, err
		}
		rx.Color, rx.Width = col, vg.Points(1.8)
		p.Add(rx)
		key := run.Forwarder
		if run.Round == 0 {
			key = fmt.Sprint(i)
		}
		if looks[i].legend != "" {
			group[key] = &entry{name: looks[i].legend, thumb: rx}
			entries = append(entries, group[key])
		}
		target, err := plotter.NewLine(staircase(run.Steps, func(s Step) float64 { return s.TargetPPS / scale }, func(v float64) bool { return v <= 0 }))
		if err == nil {
			target.Color, target.Width, target.Dashes = col, vg.Points(0.7), []vg.Length{vg.Points(3), vg.Points(3)}
			p.Add(target)
		}
		if st := run.MaxCleanStep(); st != nil {
			pt := plotter.XYs{{X: st.StartS + st.DurationS/2, Y: st.RxPPS / scale}}
			sc, err := plotter.NewScatter(pt)
			if err != nil {
				return nil, err
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(4), Shape: draw.CircleGlyph{}}
			p.Add(sc)
			if looks[i].label != "" && group[key] != nil {
				what := "max clean"
				if run.Round != 0 {
					what = "median max clean"
				}
				group[key].note = fmt.Sprintf("%s %s, %.2f Gbps", what, FormatPPS(st.RxPPS), st.RxBPS/1e9)
			}
		}
	}
	for _, e := range entries {
		p.Legend.Add(e.name, e.thumb)
		if e.note != "" {
			p.Legend.Add(e.note)
		}
	}
	return p, nil
}

func (r *Report) latencyPlot() (*plot.Plot, error) {
	p := newPlot("One-way latency per step (solid: p50, dashed: p99, dotted: max)", "latency (µs, log)")
	p.Y.Tick.Marker = pow10Ticks{}
	lo, hi := math.Inf(1), 0.0
	looks := r.looks()
	for i, run := range r.Runs {
		col := looks[i].col
		for k, pick := range []func(Step) float64{
			func(s Step) float64 { return s.Latency.P50Us },
			func(s Step) float64 { return s.Latency.P99Us },
			func(s Step) float64 { return s.Latency.MaxUs },
		} {
			xy := staircase(run.Steps, pick, func(v float64) bool { return v <= 0 })
			if len(xy) == 0 {
				continue
			}
			for j := range xy {
				lo, hi = min(lo, xy[j].Y), max(hi, xy[j].Y)
				xy[j].Y = math.Log10(xy[j].Y)
			}
			l, err := plotter.NewLine(xy)
			if err != nil {
				return nil, err
			}
			l.Color = col
			switch k {
			case 0:
				l.Width = vg.Points(1.8)
				if looks[i].legend != "" {
					p.Legend.Add(looks[i].legend, l)
				}
			case 1:
				l.Width, l.Dashes = vg.Points(1.2), []vg.Length{vg.Points(5), vg.Points(3)}
			case 2:
				l.Width, l.Dashes = vg.Points(0.8), []vg.Length{vg.Points(1), vg.Points(2)}
			}
			p.Add(l)
		}
	}
	if hi == 0 { // no latency at all: keep the axis valid
		lo, hi = 1, 10
	}
	p.Y.Min, p.Y.Max = math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	return p, nil
}

// pow10Ticks labels a linear axis of log10 values as powers of ten. The
// latency chart plots log10(µs) rather than using plot.LogScale: when gonum
// pads a plot for its axis label it centres the label at the mean of the
// axis's min and max in data units (axis.go, verticalAxis.GlyphBoxes), which
// on a log axis sits near the top, and left a blank band under the title.
type pow10Ticks struct{}

func (pow10Ticks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.LogTicks{Prec: -1}.Ticks(math.Pow(10, lo), math.Pow(10, hi))
	for i := range ts {
		ts[i].Value = math.Log10(ts[i].Value)
	}
	return ts
}

func (r *Report) lossPlot() (*plot.Plot, error) {
	p := newPlot("Loss per step", "loss (%)")
	p.Y.Min = 0
	maxLoss := 0.0
	looks := r.looks()
	for i, run := range r.Runs {
		l, err := plotter.NewLine(staircase(run.Steps, func(s Step) float64 { return s.LossPct }, nil))
		if err != nil {
			return nil, err
		}
		for _, s := range run.Steps {
			maxLoss = max(maxLoss, s.LossPct)
		}
		l.Color, l.Width = looks[i].col, vg.Points(1.8)
		p.Add(l)
		if looks[i].legend != "" {
			p.Legend.Add(looks[i].legend, l)
		}
	}
	thr := r.Settings.LossThreshold
	if thr > 0 {
		end := 0.0
		for _, run := range r.Runs {
			if n := len(run.Steps); n > 0 {
				end = max(end, run.Steps[n-1].StartS+run.Steps[n-1].DurationS)
			}
		}
		tl, err := plotter.NewLine(plotter.XYs{{X: 0, Y: thr}, {X: end, Y: thr}})
		if err != nil {
			return nil, err
		}
		tl.Color, tl.Dashes = color.Gray{Y: 90}, []vg.Length{vg.Points(6), vg.Points(3)}
		p.Add(tl)
		p.Legend.Add(fmt.Sprintf("threshold %g%%", thr), tl)
	}
	p.Y.Max = max(1, maxLoss*1.1, thr*2)
	return p, nil
}
