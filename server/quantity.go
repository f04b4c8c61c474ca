package server

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseQuantityBytes parses a Kubernetes-style memory quantity ("512Mi",
// "1Gi", "500M", "1e9", "1024") into bytes.
//
// # Errors
// When s is not a positive quantity or overflows int64.
func ParseQuantityBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	suffixes := []struct {
		sfx  string
		mult float64
	}{
		{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
		{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
	}
	mult := 1.0
	num := s
	for _, x := range suffixes {
		if strings.HasSuffix(s, x.sfx) {
			mult, num = x.mult, strings.TrimSuffix(s, x.sfx)
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return 0, fmt.Errorf("%q is not a positive quantity such as 512Mi or 1Gi", s)
	}
	b := v * mult
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(b), nil
}

// ParseCPUMillis parses a CPU quantity ("500m", "1", "0.5") into millicores.
//
// # Errors
// When s is not a positive quantity.
func ParseCPUMillis(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if strings.HasSuffix(s, "m") {
		n, err := strconv.ParseInt(strings.TrimSuffix(s, "m"), 10, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%q is not a positive CPU quantity such as 500m or 2", s)
		}
		return n, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 || v > 1e6 {
		return 0, fmt.Errorf("%q is not a positive CPU quantity such as 500m or 2", s)
	}
	return int64(math.Ceil(v * 1000)), nil
}
