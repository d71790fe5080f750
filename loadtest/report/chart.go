package report

import (
	"fmt"
	"html"
	"math"
	"strings"

	"github.com/repool/repool/loadtest/summary"
)

// point is one (x, y) of a series; a NaN y is a gap.
type point struct{ x, y float64 }

// line is one series of a chart.
type line struct {
	name   string
	color  string
	dashed bool
	points []point
}

// chart is an SVG line chart with shaded fault windows.
type chart struct {
	title   string
	yLabel  string
	width   int
	height  int
	xMax    float64
	yMin    float64 // > 0 when log
	yMax    float64
	log     bool
	yFormat func(float64) string
	lines   []line
	windows []summary.Window
}

const (
	marginLeft   = 70
	marginRight  = 150
	marginTop    = 30
	marginBottom = 36
)

// svg renders the chart.
func (c chart) svg() string {
	var b strings.Builder
	pw := float64(c.width - marginLeft - marginRight)
	ph := float64(c.height - marginTop - marginBottom)
	x := func(v float64) float64 { return marginLeft + v/c.xMax*pw }
	y := func(v float64) float64 {
		var f float64
		if c.log {
			f = (math.Log10(v) - math.Log10(c.yMin)) / (math.Log10(c.yMax) - math.Log10(c.yMin))
		} else {
			f = (v - c.yMin) / (c.yMax - c.yMin)
		}
		f = math.Max(0, math.Min(1, f))
		return marginTop + ph*(1-f)
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`,
		c.width, c.height, c.width, c.height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`, c.width, c.height)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14" font-weight="bold">%s</text>`, marginLeft, html.EscapeString(c.title))
	// Fault windows.
	for _, w := range c.windows {
		x0, x1 := x(w.StartS), x(math.Min(w.EndS, c.xMax))
		if x1-x0 < 2 {
			x1 = x0 + 2
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%.1f" fill="#d62728" fill-opacity="0.10" stroke="#d62728" stroke-opacity="0.4" stroke-dasharray="4 3"/>`,
			x0, marginTop, x1-x0, ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#d62728" font-size="11">%s %s</text>`, x0+4, marginTop+13, html.EscapeString(w.Provider), html.EscapeString(w.Kind))
	}
	// Y grid and labels.
	for _, t := range c.yTicks() {
		yy := y(t)
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`, marginLeft, marginLeft+pw, yy, yy)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`, marginLeft-6, yy+4, html.EscapeString(c.yFormat(t)))
	}
	// X axis: seconds.
	step := niceStep(c.xMax / 10)
	for t := 0.0; t <= c.xMax+1e-9; t += step {
		xx := x(t)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#999"/>`, xx, xx, marginTop+ph, marginTop+ph+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%gs</text>`, xx, marginTop+ph+17, t)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`, marginLeft, marginTop, pw, ph)
	fmt.Fprintf(&b, `<text transform="translate(14 %.1f) rotate(-90)" text-anchor="middle" fill="#555">%s</text>`, marginTop+ph/2, html.EscapeString(c.yLabel))
	// Lines.
	for i, l := range c.lines {
		var d strings.Builder
		pen := false
		for _, p := range l.points {
			if math.IsNaN(p.y) || (c.log && p.y <= 0) {
				pen = false
				continue
			}
			cmd := "L"
			if !pen {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.1f %.1f ", cmd, x(p.x), y(p.y))
			pen = true
		}
		dash := ""
		if l.dashed {
			dash = ` stroke-dasharray="5 3"`
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.8"%s/>`, strings.TrimSpace(d.String()), l.color, dash)
		ly := marginTop + 12 + i*18
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`, marginLeft+pw+12, marginLeft+pw+34, ly-4, ly-4, l.color, dash)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`, marginLeft+pw+40, ly, html.EscapeString(l.name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

func (c chart) yTicks() []float64 {
	var out []float64
	if c.log {
		for v := math.Pow(10, math.Floor(math.Log10(c.yMin))); v <= c.yMax*1.0001; v *= 10 {
			if v >= c.yMin*0.9999 {
				out = append(out, v)
			}
		}
		return out
	}
	step := niceStep((c.yMax - c.yMin) / 5)
	for v := c.yMin; v <= c.yMax+1e-9; v += step {
		out = append(out, v)
	}
	return out
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
