package operation

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// stages times each leg of the path, so an operator (and the bench) can see
// where a request's time goes: forge resolve, daemon query, ledger row; the
// daemon query is split by the daemon's own timing into the gRPC hop, the
// daemon's work (decode, convert, sanitise, evidence) and the language
// server's wire time.
var stageBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

type stageTimer struct {
	h *prometheus.HistogramVec
}

func newStageTimer(reg prometheus.Registerer) stageTimer {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "lsp_proxy_stage_seconds", Help: "Time spent per stage of an operation request.", Buckets: stageBuckets,
	}, []string{"stage"})
	if reg != nil {
		reg.MustRegister(h)
	}
	return stageTimer{h: h}
}

func (t stageTimer) since(stage string, start time.Time) {
	t.h.WithLabelValues(stage).Observe(time.Since(start).Seconds())
}

func (t stageTimer) observe(stage string, d time.Duration) {
	t.h.WithLabelValues(stage).Observe(d.Seconds())
}
