package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// chart draws, for each scenario, each implementation's throughput as a
// ratio to the floor of the same rep.
func (r *results) chart(file string) error {
	p := plot.New()
	p.Title.Text = "Throughput relative to the floor (higher is better)"
	p.Y.Label.Text = "x floor"
	scenarios := []string{"uncontended", "8 names", "contended, 8 handles"}
	colors := []color.Color{
		color.RGBA{128, 128, 128, 255}, color.RGBA{230, 159, 0, 255}, color.RGBA{86, 180, 233, 255},
		color.RGBA{0, 158, 115, 255}, color.RGBA{204, 121, 167, 255},
	}
	width := vg.Points(14)
	top := 1.0
	for i, im := range impls {
		vals := plotter.Values{
			ratio(r.uncontended[im.name], r.uncontended["floor"]),
			ratio(r.names[im.name], r.names["floor"]),
			ratio(r.contendedRates(im.name), r.contendedRates("floor")),
		}
		for _, v := range vals {
			top = max(top, v)
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		bars.Color = colors[i%len(colors)]
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(i-len(impls)/2) * width
		p.Add(bars)
		p.Legend.Add(im.name, bars)
	}
	p.Legend.Top = true
	p.Y.Min, p.Y.Max = 0, top*1.45 // room for the legend above the bars
	p.NominalX(scenarios...)
	if err := p.Save(8*vg.Inch, 4.5*vg.Inch, file); err != nil {
		return fmt.Errorf("writing the chart: %w", err)
	}
	return nil
}
