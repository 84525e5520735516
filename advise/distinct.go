package advise

import (
	"math"
	"math/bits"
)

// hllBits is the precision of the distinct-key counts: 2¹² registers of a
// byte, a standard error of 1.04/√4096 ≈ 1.6%, in 4 KiB per class.
const hllBits = 12

// distinct estimates the number of distinct keys from their 64-bit hashes
// (HyperLogLog), in constant memory however many keys there are.
type distinct struct {
	reg [1 << hllBits]uint8
}

func (d *distinct) add(hash uint64) {
	i := hash >> (64 - hllBits)
	rho := uint8(bits.LeadingZeros64(hash<<hllBits|1<<(hllBits-1)) + 1)
	if rho > d.reg[i] {
		d.reg[i] = rho
	}
}

// count is the estimate, with the small-range correction (linear counting
// while registers are still empty).
func (d *distinct) count() int64 {
	const m = float64(1 << hllBits)
	var sum float64
	zeros := 0
	for _, r := range d.reg {
		sum += math.Ldexp(1, -int(r))
		if r == 0 {
			zeros++
		}
	}
	e := 0.7213 / (1 + 1.079/m) * m * m / sum
	if e <= 2.5*m && zeros > 0 {
		e = m * math.Log(m/float64(zeros))
	}
	return int64(math.Round(e))
}
