package shapes

// Square has four equal sides.
type Square struct {
	Side float64
}

// Area of a square.
func (s Square) Area() float64 { return s.Side * s.Side }
