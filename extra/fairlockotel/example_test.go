package fairlockotel_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/extra/fairlockotel"
	"github.com/fairlock/fairlock/fair"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// An Observer records every lock it is given to; here, to a manual reader
// read back at once. A service gives it its own MeterProvider (with an
// OTLP or Prometheus exporter) or none, for the global one.
func Example() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer func() { _ = client.Close() }()
	owner, _ := fairlock.NewOwner(client)
	defer owner.Close(context.Background())

	reader := sdkmetric.NewManualReader()
	obs, err := fairlockotel.New(fairlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		panic(err)
	}
	m, err := fair.New(owner, "jobs", fairlock.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := m.Do(ctx, func(context.Context) error { return nil }); err != nil {
		panic(err)
	}

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	for _, met := range rm.ScopeMetrics[0].Metrics {
		if h, ok := met.Data.(metricdata.Histogram[float64]); ok {
			fmt.Printf("%s (%s): %d\n", met.Name, met.Unit, h.DataPoints[0].Count)
		}
	}
	// Output:
	// fairlock.acquire.duration (s): 1
	// fairlock.hold.duration (s): 1
}
