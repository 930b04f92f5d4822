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

// Charts renders the report's figures.
func (r *Report) Charts() ([]Chart, error) {
	build := map[string]func() (*plot.Plot, error){
		ChartThroughput: r.throughputPlot,
		ChartLatency:    r.latencyPlot,
		ChartLoss:       r.lossPlot,
	}
	var out []Chart
	for _, name := range []string{ChartThroughput, ChartLatency, ChartLoss} {
		p, err := build[name]()
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", name, err)
		}
		c, err := render(name, p.Title.Text, chartW, chartH, func(dc draw.Canvas) { p.Draw(dc) })
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	// Each panel is built afresh: a plot.Plot keeps state from drawing.
	var fresh []*plot.Plot
	for _, name := range []string{ChartThroughput, ChartLatency, ChartLoss} {
		p, _ := build[name]()
		fresh = append(fresh, p)
	}
	title := "Stepped load: " + r.Settings.Profile.Name
	summary, err := render(ChartSummary, title, chartW, 3*chartH, func(dc draw.Canvas) {
		tiles := draw.Tiles{Rows: 3, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(10)}
		canvases := plot.Align([][]*plot.Plot{{fresh[0]}, {fresh[1]}, {fresh[2]}}, tiles, dc)
		for i := range fresh {
			fresh[i].Draw(canvases[i][0])
		}
	})
	if err != nil {
		return nil, err
	}
	return append([]Chart{summary}, out...), nil
}

func render(name, title string, w, h vg.Length, drawFn func(draw.Canvas)) (Chart, error) {
	c := Chart{Name: name, Title: title}
	sc := vgsvg.New(w, h)
	drawFn(draw.New(sc))
	var sb bytes.Buffer
	if _, err := sc.WriteTo(&sb); err != nil {
		return c, err
	}
	c.SVG = sb.Bytes()
	ic := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi))
	drawFn(draw.New(ic))
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
	p.Legend.Top = true
	p.Legend.Left = true
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
	for i, run := range r.Runs {
		col := looks[i].col
		rx, err := plotter.NewLine(staircase(run.Steps, func(s Step) float64 { return s.RxPPS / scale }, nil))
		if err != nil {
			return nil, err
		}
		rx.Color, rx.Width = col, vg.Points(1.8)
		p.Add(rx)
		if looks[i].legend != "" {
			p.Legend.Add(looks[i].legend, rx)
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
			if looks[i].label == "" {
				continue
			}
			lb, err := plotter.NewLabels(plotter.XYLabels{XYs: pt, Labels: []string{
				fmt.Sprintf("%s %s (%.2f Gbps)", looks[i].label, FormatPPS(st.RxPPS), st.RxBPS/1e9)}})
			if err != nil {
				return nil, err
			}
			lb.Offset = vg.Point{X: vg.Points(-60), Y: vg.Points(6 + 9*float64(i%3))}
			for j := range lb.TextStyle {
				lb.TextStyle[j].Color = col
				lb.TextStyle[j].Font.Size = vg.Points(8)
			}
			p.Add(lb)
		}
	}
	return p, nil
}

func (r *Report) latencyPlot() (*plot.Plot, error) {
	p := newPlot("One-way latency per step (solid: p50, dashed: p99, dotted: max)", "latency (µs, log)")
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
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
			for _, pt := range xy {
				lo, hi = min(lo, pt.Y), max(hi, pt.Y)
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
	if hi == 0 { // no latency at all: keep the log axis valid
		lo, hi = 1, 10
	}
	p.Y.Min, p.Y.Max = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	return p, nil
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
