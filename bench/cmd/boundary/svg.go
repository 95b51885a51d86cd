package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// line is one algorithm's served requests, drawn as the count served in
// the last window at each moment.
type line struct {
	name   string
	served []time.Duration
}

// Colours as docs/perf-*.svg use them (internal/tools/perfchart), one per
// algorithm; colour-blind safe against each other.
var lineColours = []string{"#cf222e", "#0969da", "#8250df", "#1a7f37"}

// drawSVG draws, for each series, how many of its requests were served in
// the window ending at t, for t from 0 to span, with the limit N and 2N
// marked: the chart docs/algorithms.md embeds.
func drawSVG(out io.Writer, n int, w, span time.Duration, series []line) error {
	const (
		width, height          = 960, 400
		left, right, top, foot = 84.0, 24.0, 70.0, 44.0
		step                   = 10 * time.Millisecond
	)
	plotW, plotH := width-left-right, height-top-foot
	yMax := float64(2*n) * 1.1
	x := func(t time.Duration) float64 { return left + plotW*float64(t)/float64(span) }
	y := func(v float64) float64 { return top + plotH*(1-v/yMax) }
	var b strings.Builder
	title := fmt.Sprintf("Requests served in the last window (N = %d per W = %s)", n, w)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="-apple-system, 'Segoe UI', Helvetica, Arial, sans-serif" font-size="12" role="img" aria-label="%s">`+"\n", width, height, width, height, title)
	fmt.Fprintf(&b, "<title>%s</title>\n", title)
	b.WriteString(`<rect width="100%" height="100%" fill="#ffffff"/>` + "\n")
	fmt.Fprintf(&b, `<text x="12" y="20" font-size="15" font-weight="600" fill="#1f2328">%s</text>`+"\n", title)
	b.WriteString(`<text x="12" y="37" fill="#59636e">cd bench &amp;&amp; go run ./cmd/boundary: one request at 0, N at W − 1 ms, N at W, then one attempt every 10 ms</text>` + "\n")
	lx := 12.0
	for i, s := range series {
		fmt.Fprintf(&b, `<rect x="%.1f" y="46" width="12" height="10" fill="%s"/><text x="%.1f" y="55" fill="#1f2328">%s</text>`+"\n", lx, lineColours[i%len(lineColours)], lx+16, s.name)
		lx += 16 + 7*float64(len(s.name)) + 24
	}
	// Grid: every quarter of N up, every window across.
	for v := 0; v <= 2*n; v += n / 2 {
		stroke := "#eaeef2"
		if v == n || v == 2*n {
			stroke = "#8c959f"
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", left, y(float64(v)), left+plotW, y(float64(v)), stroke)
		label := fmt.Sprint(v)
		switch v {
		case n:
			label = fmt.Sprintf("N = %d", v)
		case 2 * n:
			label = fmt.Sprintf("2N = %d", v)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#59636e">%s</text>`+"\n", left-6, y(float64(v))+4, label)
	}
	for t := time.Duration(0); t <= span; t += w {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eaeef2"/>`+"\n", x(t), top, x(t), top+plotH)
		label := "0"
		if t > 0 {
			label = fmt.Sprintf("%dW", t/w)
			if t == w {
				label = "W"
			}
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#59636e">%s</text>`+"\n", x(t), top+plotH+16, label)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#59636e">time (W = %s)</text>`+"\n", left+plotW/2, top+plotH+34, w)
	// The widest line first and half transparent, so that one drawn over
	// it where two algorithms serve alike (sliding and GCRA with burst N
	// after a pair) still shows both.
	for _, i := range drawOrder(len(series)) {
		s := series[i]
		width, opacity := 2.0, 1.0
		if i == 1 {
			width, opacity = 7, 0.45
		}
		var pts []string
		lo, hi := 0, 0 // served[lo:hi] is in (t − w, t]
		for t := time.Duration(0); t <= span; t += step {
			for hi < len(s.served) && s.served[hi] <= t {
				hi++
			}
			for lo < hi && s.served[lo] <= t-w {
				lo++
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(t), y(float64(hi-lo))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.0f" stroke-opacity="%.2f" stroke-linejoin="round" points="%s"/>`+"\n",
			lineColours[i%len(lineColours)], width, opacity, strings.Join(pts, " "))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(out, b.String())
	return err
}

// drawOrder draws the second series (sliding) first: it is the wide one.
func drawOrder(n int) []int {
	order := make([]int, 0, n)
	if n > 1 {
		order = append(order, 1)
	}
	for i := range n {
		if i != 1 {
			order = append(order, i)
		}
	}
	return order
}
