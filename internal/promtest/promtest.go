// Package promtest scrapes a Prometheus /metrics page over HTTP and parses
// it with the Prometheus library's own parser (expfmt), for the tests of
// the metrics package and of the commands that serve it.
package promtest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are the metric families of a scrape, by name.
type Families map[string]*dto.MetricFamily

// Scrape fetches url (the text format) and parses it.
func Scrape(url string) (Families, error) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		return nil, fmt.Errorf("GET %s: content type %q, want the text format", url, ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(resp.Body)
}

// Metric returns the series of family name whose labels include labels
// (name, value, name, value...): an error unless there is exactly one.
func (f Families) Metric(name string, labels ...string) (*dto.Metric, error) {
	mf := f[name]
	if mf == nil {
		return nil, fmt.Errorf("no metric %s", name)
	}
	var found *dto.Metric
	for _, m := range mf.GetMetric() {
		if hasLabels(m, labels) {
			if found != nil {
				return nil, fmt.Errorf("%s%v: more than one series", name, labels)
			}
			found = m
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%s%v: no such series", name, labels)
	}
	return found, nil
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		ok := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// Value returns the value of a counter or gauge series (see Metric), or
// the sample count of a histogram; an error if there is no such series.
func (f Families) Value(name string, labels ...string) (float64, error) {
	m, err := f.Metric(name, labels...)
	if err != nil {
		return 0, err
	}
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue(), nil
	case m.Gauge != nil:
		return m.GetGauge().GetValue(), nil
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount()), nil
	case m.Untyped != nil:
		return m.GetUntyped().GetValue(), nil
	}
	return 0, fmt.Errorf("%s%v: not a counter, gauge or histogram", name, labels)
}

// Want is a series and the value wanted of it (see Families.Value).
type Want struct {
	Name   string
	Labels []string // name, value, ...
	Value  float64
}

// Check returns a line for each want that fams does not hold.
func (f Families) Check(want ...Want) []string {
	var bad []string
	for _, w := range want {
		got, err := f.Value(w.Name, w.Labels...)
		if err != nil {
			bad = append(bad, err.Error())
		} else if got != w.Value {
			bad = append(bad, fmt.Sprintf("%s%v = %v, want %v", w.Name, w.Labels, got, w.Value))
		}
	}
	return bad
}

// Await scrapes url until it holds every want or timeout has passed (what
// a server counts on its own goroutines may be counted after its client
// saw the outcome). It returns the last scrape and what it did not hold.
func Await(url string, timeout time.Duration, want ...Want) (Families, []string, error) {
	deadline := time.Now().Add(timeout)
	for {
		fams, err := Scrape(url)
		if err != nil {
			return nil, nil, err
		}
		bad := fams.Check(want...)
		if len(bad) == 0 || time.Now().After(deadline) {
			return fams, bad, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Series is Want{name, labels, value}.
func Series(name string, value float64, labels ...string) Want {
	return Want{Name: name, Labels: labels, Value: value}
}

// Require scrapes url until it holds every want (Await, up to 10 s), and
// fails t with what it did not hold.
func Require(t testing.TB, url string, want ...Want) Families {
	t.Helper()
	fams, bad, err := Await(url, 10*time.Second, want...)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
	if len(bad) > 0 {
		t.FailNow()
	}
	return fams
}
