package advise

// Timestamps are parsed by hand: time.Parse allocates and is several times
// slower than the rest of a line's parse.

// daysIn is the number of days of month mo of year y: a date such as
// 31/Feb is no date, and its line is malformed.
func daysIn(y, mo int64) int64 {
	switch mo {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil is the number of days from 1970-01-01 to y-m-d in the
// proleptic Gregorian calendar (Howard Hinnant's algorithm).
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// digits reads n decimal digits at b[i:], or ok = false.
func digits(b []byte, i, n int) (v int64, ok bool) {
	if i+n > len(b) {
		return 0, false
	}
	for _, c := range b[i : i+n] {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// monthIndex reads a three-letter English month name.
func monthIndex(b []byte) int64 {
	if len(b) < 3 {
		return 0
	}
	switch string(b[:3]) {
	case "Jan":
		return 1
	case "Feb":
		return 2
	case "Mar":
		return 3
	case "Apr":
		return 4
	case "May":
		return 5
	case "Jun":
		return 6
	case "Jul":
		return 7
	case "Aug":
		return 8
	case "Sep":
		return 9
	case "Oct":
		return 10
	case "Nov":
		return 11
	case "Dec":
		return 12
	}
	return 0
}

// unixMicro assembles a UTC date and time (validated here) into Unix µs.
func unixMicro(y, mo, d, h, mi, s, micro int64) (int64, bool) {
	if mo < 1 || mo > 12 || d < 1 || d > daysIn(y, mo) || h > 23 || mi > 59 || s > 60 || y < 1970 || y > 9999 {
		return 0, false
	}
	sec := daysFromCivil(y, mo, d)*86400 + h*3600 + mi*60 + s
	return sec*1e6 + micro, true
}

// parseZone reads a zone at b[i:]: Z, +hh:mm, +hhmm, -hh or nothing, and
// returns its offset east of UTC in seconds and the index after it.
func parseZone(b []byte, i int) (offset int64, next int, ok bool) {
	if i >= len(b) {
		return 0, i, true
	}
	switch b[i] {
	case 'Z', 'z':
		return 0, i + 1, true
	case '+', '-':
	default:
		return 0, i, true
	}
	sign := int64(1)
	if b[i] == '-' {
		sign = -1
	}
	hh, ok := digits(b, i+1, 2)
	if !ok {
		return 0, i, false
	}
	j := i + 3
	var mm int64
	if j < len(b) && b[j] == ':' {
		j++
	}
	if v, ok := digits(b, j, 2); ok {
		mm, j = v, j+2
	}
	return sign * (hh*3600 + mm*60), j, true
}

// parseCLFTime reads 10/Oct/2000:13:55:36 -0700 (the brackets removed).
func parseCLFTime(b []byte) (int64, bool) {
	if len(b) < 20 || b[2] != '/' || b[6] != '/' || b[11] != ':' || b[14] != ':' || b[17] != ':' {
		return 0, false
	}
	d, ok1 := digits(b, 0, 2)
	mo := monthIndex(b[3:6])
	y, ok2 := digits(b, 7, 4)
	h, ok3 := digits(b, 12, 2)
	mi, ok4 := digits(b, 15, 2)
	s, ok5 := digits(b, 18, 2)
	if !(ok1 && ok2 && ok3 && ok4 && ok5) {
		return 0, false
	}
	i := 20
	var micro int64
	if i < len(b) && (b[i] == '.' || b[i] == ',') { // some servers log milliseconds
		i, micro = fraction(b, i+1)
	}
	var off int64
	if i < len(b) && b[i] == ' ' {
		var ok bool
		if off, _, ok = parseZone(b, i+1); !ok {
			return 0, false
		}
	}
	t, ok := unixMicro(y, mo, d, h, mi, s, micro)
	return t - off*1e6, ok
}

// fraction reads decimal fraction digits at b[i:] as microseconds.
func fraction(b []byte, i int) (next int, micro int64) {
	scale := int64(100000)
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		micro += int64(b[i]-'0') * scale
		scale /= 10
	}
	return i, micro
}

// parseISOTime reads RFC 3339 and its common relaxations:
// 2006-01-02T15:04:05[.frac][Z|±hh:mm|±hhmm], with T or a space.
func parseISOTime(b []byte) (int64, bool) {
	if len(b) < 19 || b[4] != '-' || b[7] != '-' || (b[10] != 'T' && b[10] != ' ' && b[10] != 't') || b[13] != ':' || b[16] != ':' {
		return 0, false
	}
	y, ok1 := digits(b, 0, 4)
	mo, ok2 := digits(b, 5, 2)
	d, ok3 := digits(b, 8, 2)
	h, ok4 := digits(b, 11, 2)
	mi, ok5 := digits(b, 14, 2)
	s, ok6 := digits(b, 17, 2)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return 0, false
	}
	i := 19
	var micro int64
	if i < len(b) && (b[i] == '.' || b[i] == ',') {
		i, micro = fraction(b, i+1)
	}
	if i < len(b) && b[i] == ' ' {
		i++
	}
	off, i, ok := parseZone(b, i)
	if !ok || i != len(b) {
		return 0, false
	}
	t, ok := unixMicro(y, mo, d, h, mi, s, micro)
	return t - off*1e6, ok
}

// parseEpoch reads a Unix time as a decimal number, in seconds,
// milliseconds, microseconds or nanoseconds by its magnitude (a log of
// this century has about 10, 13, 16 or 19 integer digits).
func parseEpoch(b []byte) (int64, bool) {
	var whole int64
	i, n := 0, 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if n++; n > 19 || whole > (1<<63-1-9)/10 {
			return 0, false
		}
		whole = whole*10 + int64(b[i]-'0')
	}
	if n == 0 {
		return 0, false
	}
	var micro int64
	if i < len(b) && b[i] == '.' {
		i, micro = fraction(b, i+1)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		return parseEpochFloat(b)
	}
	if i != len(b) {
		return 0, false
	}
	var t int64
	switch {
	case n <= 11:
		t = whole*1e6 + micro
	case n <= 14:
		t = whole*1e3 + micro/1e3
	case n <= 17:
		t = whole
	default:
		t = whole / 1e3
	}
	return t, t > 0 && t < maxMicro
}

// maxMicro is 10000-01-01 in Unix µs: later times are not a log's.
const maxMicro = 253402300800e6

// parseEpochFloat handles the rare exponent form, such as 1.7e9.
func parseEpochFloat(b []byte) (int64, bool) {
	var mant float64
	var scale float64 = 1
	i, seenDot := 0, false
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= '0' && c <= '9':
			mant = mant*10 + float64(c-'0')
			if seenDot {
				scale *= 10
			}
		case c == '.' && !seenDot:
			seenDot = true
		default:
			goto exp
		}
	}
exp:
	if i >= len(b) || (b[i] != 'e' && b[i] != 'E') {
		return 0, false
	}
	i++
	neg := false
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	e, n := 0, 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9' && n < 3; i++ {
		e, n = e*10+int(b[i]-'0'), n+1
	}
	if n == 0 || i != len(b) {
		return 0, false
	}
	if neg {
		e = -e
	}
	v := mant / scale
	for ; e > 0; e-- {
		v *= 10
	}
	for ; e < 0; e++ {
		v /= 10
	}
	if !(v > 0 && v < 1e19) {
		return 0, false
	}
	t, _ := parseEpochDigits(v)
	return t, t > 0 && t < maxMicro
}

func parseEpochDigits(v float64) (int64, bool) {
	switch {
	case v < 1e11:
		return int64(v * 1e6), true
	case v < 1e14:
		return int64(v * 1e3), true
	case v < 1e17:
		return int64(v), true
	default:
		return int64(v / 1e3), true
	}
}

// ParseTime reads a log's timestamp as the advisor does, in Unix
// microseconds: Common Log Format's 02/Jan/2006:15:04:05 -0700, ISO 8601
// (RFC 3339) with or without a zone, or a Unix time in seconds,
// milliseconds, microseconds or nanoseconds told apart by its magnitude;
// false for anything else, or a time outside years 1970 to 9999. sluice
// simulate --log reads its times with it.
func ParseTime(b []byte) (int64, bool) { return parseAnyTime(b) }

// parseAnyTime reads a timestamp in any supported form.
func parseAnyTime(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	if len(b) >= 20 && b[2] == '/' {
		return parseCLFTime(b)
	}
	if len(b) >= 19 && b[4] == '-' {
		return parseISOTime(b)
	}
	return parseEpoch(b)
}
