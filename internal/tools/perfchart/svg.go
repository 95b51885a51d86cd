package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/template"
)

// Layout of both charts, in SVG user units (pixels at 100%).
const (
	chartWidth = 960
	labelWidth = 330 // the row labels, right-aligned against the plot
	plotRight  = 110 // room right of the plot for the value labels
	rowHeight  = 26
	barHeight  = 16
	top        = 58 // the title, the subtitle and the legend
	bottom     = 34 // the axis labels
)

// bar is one drawn rectangle with its label.
type bar struct {
	Y, X, W, H float64
	Fill       string
}

// chartRow is one row of a chart: its label, bars, range whisker and value.
type chartRow struct {
	Label, Value   string
	LabelY, ValueX float64
	Bars           []bar
	Whisker        []float64 // x1, x2, y of the runs' range, or nil
}

// tick is one vertical grid line and its label.
type tick struct {
	X     float64
	Label string
}

// legendItem is one swatch of the legend.
type legendItem struct {
	X     float64
	Fill  string
	Label string
}

// chart is everything the template draws.
type chart struct {
	Width, Height    int
	Title, Subtitle  string
	PlotX, PlotW     float64
	PlotTop, PlotBot float64
	AxisLabel        string
	Rows             []chartRow
	Ticks            []tick
	Legend           []legendItem
}

// Colours by family of row, so that porch's rows stand out against the
// baselines; colour-blind safe against each other and readable on white.
const (
	colourPorch    = "#8250df"
	colourHTTPRate = "#0969da"
	colourNaive    = "#cf222e"
	colourNone     = "#8c959f"
	colourP99      = "#d8b9ff"
)

// family returns a row's colour and legend name.
func family(label string) (colour, name string) {
	switch {
	case strings.HasPrefix(label, "porch"):
		return colourPorch, "porch"
	case strings.Contains(label, "httprate"):
		return colourHTTPRate, "go-chi/httprate (memory)"
	case strings.HasPrefix(label, "naive"):
		return colourNaive, "naive SQLite, commit per request"
	}
	return colourNone, "no limiter"
}

// rowLabel is a row's label on the chart: the table's label and its keys.
func rowLabel(r row) string {
	return r.label + " · " + r.keys
}

// newChart lays out a chart with one row per table row, on an axis from 0
// to max (rounded up to a nice number) labelled with format.
func newChart(t table, title, axis string, max float64, format func(float64) string) (*chart, func(float64) float64) {
	c := &chart{
		Width:     chartWidth,
		Title:     title,
		AxisLabel: axis,
		PlotX:     labelWidth,
		PlotW:     chartWidth - labelWidth - plotRight,
		PlotTop:   top,
	}
	c.PlotBot = top + float64(len(t.rows))*rowHeight
	c.Height = int(c.PlotBot) + bottom
	c.Subtitle = "just bench: wrk -t2 -c64, median of the runs"
	if t.measured != "" {
		c.Subtitle += "; " + t.measured
	}
	step := niceStep(max / 5)
	end := math.Ceil(max/step) * step
	x := func(v float64) float64 { return c.PlotX + v/end*c.PlotW }
	for v := 0.0; v <= end+step/2; v += step {
		c.Ticks = append(c.Ticks, tick{X: x(v), Label: format(v)})
	}
	return c, x
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// drawThroughput draws requests per second, one bar per row, with the
// runs' range as a whisker.
func drawThroughput(w io.Writer, t table) error {
	max := 0.0
	for _, r := range t.rows {
		max = math.Max(max, r.max)
	}
	c, x := newChart(t, "Requests per second (higher is better)", "requests per second: the bar is the median run, the whisker the runs' range", max, func(v float64) string {
		if v >= 1000 {
			return fmt.Sprintf("%gk", v/1000)
		}
		return fmt.Sprintf("%g", v)
	})
	seen := map[string]bool{}
	for i, r := range t.rows {
		y := top + float64(i)*rowHeight
		colour, name := family(r.label)
		if !seen[name] {
			seen[name] = true
			c.Legend = append(c.Legend, legendItem{Fill: colour, Label: name})
		}
		cy := y + rowHeight/2
		c.Rows = append(c.Rows, chartRow{
			Label:   rowLabel(r),
			LabelY:  cy + 4,
			Bars:    []bar{{X: c.PlotX, Y: cy - barHeight/2, W: x(r.rps) - c.PlotX, H: barHeight, Fill: colour}},
			Whisker: []float64{x(r.min), x(r.max), cy},
			Value:   kilo(r.rps),
			ValueX:  math.Max(x(r.rps), x(r.max)) + 6,
		})
	}
	placeLegend(c)
	return svg.Execute(w, c)
}

// drawLatency draws p99 as a pale bar with p50 inside it, one row per row.
func drawLatency(w io.Writer, t table) error {
	max := 0.0
	for _, r := range t.rows {
		max = math.Max(max, r.p99)
	}
	c, x := newChart(t, "Latency: p50 and p99 (lower is better)", "milliseconds", max, func(v float64) string {
		return fmt.Sprintf("%g ms", v)
	})
	c.Legend = []legendItem{{Fill: colourPorch, Label: "p50: the inner bar, coloured by row family"}, {Fill: colourP99, Label: "p99: the pale bar"}}
	for i, r := range t.rows {
		y := top + float64(i)*rowHeight
		colour, _ := family(r.label)
		cy := y + rowHeight/2
		c.Rows = append(c.Rows, chartRow{
			Label:  rowLabel(r),
			LabelY: cy + 4,
			Bars: []bar{
				{X: c.PlotX, Y: cy - barHeight/2, W: x(r.p99) - c.PlotX, H: barHeight, Fill: colourP99},
				{X: c.PlotX, Y: cy - barHeight/2 + 3, W: x(r.p50) - c.PlotX, H: barHeight - 6, Fill: colour},
			},
			Value:  fmt.Sprintf("%.2f / %.2f ms", r.p50, r.p99),
			ValueX: x(r.p99) + 6,
		})
	}
	placeLegend(c)
	return svg.Execute(w, c)
}

// placeLegend spaces the legend's swatches along the line under the title.
func placeLegend(c *chart) {
	x := 12.0
	for i := range c.Legend {
		c.Legend[i].X = x
		x += 26 + 7*float64(len([]rune(c.Legend[i].Label)))
	}
}

// kilo formats a rate for a bar's label: 41.7k, or 950 under a thousand.
func kilo(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

// svg is the chart template. text/template does not escape, so every
// string from the input goes through xml.
var svg = template.Must(template.New("svg").Funcs(template.FuncMap{
	"xml":  xmlEscape,
	"f":    func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"add":  func(a, b float64) float64 { return a + b },
	"half": func(a float64) float64 { return a / 2 },
}).Parse(`<svg xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" font-family="-apple-system, 'Segoe UI', Helvetica, Arial, sans-serif" font-size="12" role="img" aria-label="{{xml .Title}}">
<title>{{xml .Title}}</title>
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="12" y="20" font-size="15" font-weight="600" fill="#1f2328">{{xml .Title}}</text>
<text x="12" y="37" fill="#59636e">{{xml .Subtitle}}</text>
{{range .Legend}}<rect x="{{f .X}}" y="44" width="12" height="10" fill="{{.Fill}}"/><text x="{{f (add .X 16)}}" y="53" fill="#1f2328">{{xml .Label}}</text>
{{end}}{{range .Ticks}}<line x1="{{f .X}}" y1="{{f $.PlotTop}}" x2="{{f .X}}" y2="{{f $.PlotBot}}" stroke="#eaeef2"/>
<text x="{{f .X}}" y="{{f (add $.PlotBot 14)}}" text-anchor="middle" fill="#59636e">{{xml .Label}}</text>
{{end}}<line x1="{{f .PlotX}}" y1="{{f .PlotTop}}" x2="{{f .PlotX}}" y2="{{f .PlotBot}}" stroke="#8c959f"/>
<text x="{{f (add .PlotX (half .PlotW))}}" y="{{f (add .PlotBot 30)}}" text-anchor="middle" fill="#59636e">{{xml .AxisLabel}}</text>
{{range .Rows}}<text x="{{f (add $.PlotX -8)}}" y="{{f .LabelY}}" text-anchor="end" fill="#1f2328">{{xml .Label}}</text>
{{range .Bars}}<rect x="{{f .X}}" y="{{f .Y}}" width="{{f .W}}" height="{{f .H}}" fill="{{.Fill}}"/>
{{end}}{{with .Whisker}}<line x1="{{f (index . 0)}}" y1="{{f (index . 2)}}" x2="{{f (index . 1)}}" y2="{{f (index . 2)}}" stroke="#1f2328" stroke-width="1.5"/><line x1="{{f (index . 0)}}" y1="{{f (add (index . 2) -4)}}" x2="{{f (index . 0)}}" y2="{{f (add (index . 2) 4)}}" stroke="#1f2328" stroke-width="1.5"/><line x1="{{f (index . 1)}}" y1="{{f (add (index . 2) -4)}}" x2="{{f (index . 1)}}" y2="{{f (add (index . 2) 4)}}" stroke="#1f2328" stroke-width="1.5"/>
{{end}}<text x="{{f .ValueX}}" y="{{f .LabelY}}" fill="#1f2328">{{xml .Value}}</text>
{{end}}</svg>
`))

// xmlEscape escapes s for XML text and attribute values.
func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;").Replace(s)
}
