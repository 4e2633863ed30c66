package httpapi

import (
	"errors"
	"strconv"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/operation"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	prepares *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lsp_proxy_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lsp_proxy_operation_seconds", Help: "Operation latency by op and whether this request prepared.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"op", "path"}),
		prepares: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lsp_proxy_prepares_total", Help: "Chargeable prepares done by this proxy, by outcome.",
		}, []string{"outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.latency, m.prepares)
	}
	return m
}

// observe counts every request by route and final status.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		status := c.Response().Status
		if err != nil {
			var he *echo.HTTPError
			if errors.As(err, &he) {
				status = he.Code
			} else {
				status = apierr.From(err).Status
			}
		}
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		s.metrics.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
		return err
	}
}

func (m *metrics) observeOp(op string, took time.Duration, res *operation.Result) {
	path := "warm"
	if res != nil && res.Prepared {
		path = "cold"
		m.prepares.WithLabelValues("charged").Inc()
	}
	m.latency.WithLabelValues(op, path).Observe(took.Seconds())
}
