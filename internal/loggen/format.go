package loggen

import "strconv"

var monthNames = [12]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// AppendLine appends e as one line of format f (not Mixed), newline
// included.
func AppendLine(b []byte, e *Event, f Format) []byte {
	switch f {
	case JSON:
		b = append(b, `{"time":"`...)
		b = appendISO(b, e.Time)
		b = append(b, `","remote_addr":"`...)
		b = append(b, e.IP...)
		b = append(b, `","method":"`...)
		b = append(b, e.Method...)
		b = append(b, `","path":"`...)
		b = append(b, e.Path...)
		b = append(b, `","status":`...)
		b = strconv.AppendInt(b, int64(e.Status), 10)
		b = append(b, `,"bytes":`...)
		b = strconv.AppendInt(b, int64(e.Size), 10)
		if e.User != "" {
			b = append(b, `,"api_key":"`...)
			b = append(b, e.User...)
			b = append(b, '"')
		}
		b = append(b, `,"user_agent":"`...)
		b = append(b, e.Agent...)
		return append(b, "\"}\n"...)
	case JSONAlt:
		b = append(b, `{"level":"info","msg":"request","@timestamp":"`...)
		b = appendISO(b, e.Time)
		b = append(b, `","http":{"request_method":"`...)
		b = append(b, e.Method...)
		b = append(b, `","request_uri":"`...)
		b = append(b, e.Path...)
		b = append(b, `?v=1","status":`...)
		b = strconv.AppendInt(b, int64(e.Status), 10)
		b = append(b, `},"client_ip":"`...)
		b = append(b, e.IP...)
		b = append(b, '"')
		if e.User != "" {
			b = append(b, `,"user_id":"`...)
			b = append(b, e.User...)
			b = append(b, '"')
		}
		b = append(b, `,"duration_ms":12.5,"tags":["web",{"x":1}]}`...)
		return append(b, '\n')
	}
	b = append(b, e.IP...)
	b = append(b, " - "...)
	if e.User != "" {
		b = append(b, e.User...)
	} else {
		b = append(b, '-')
	}
	b = append(b, " ["...)
	b = appendCLFTime(b, e.Time/1e6)
	b = append(b, "] \""...)
	b = append(b, e.Method...)
	b = append(b, ' ')
	b = append(b, e.Path...)
	b = append(b, " HTTP/1.1\" "...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(e.Size), 10)
	if f == Combined {
		b = append(b, ` "-" "`...)
		b = append(b, e.Agent...)
		b = append(b, '"')
	}
	return append(b, '\n')
}

// civil converts Unix seconds to a UTC date and time (Howard Hinnant's
// days-from-civil, inverted).
func civil(sec int64) (year, month, day, hour, min, s int) {
	days := sec / 86400
	rem := sec % 86400
	if rem < 0 {
		rem += 86400
		days--
	}
	hour, min, s = int(rem/3600), int(rem%3600/60), int(rem%60)
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	return int(y), int(m), int(d), hour, min, s
}

func append2(b []byte, n int) []byte { return append(b, byte('0'+n/10), byte('0'+n%10)) }

// appendCLFTime writes 05/Jan/2026:13:55:36 +0000.
func appendCLFTime(b []byte, sec int64) []byte {
	y, m, d, hh, mm, ss := civil(sec)
	b = append2(b, d)
	b = append(b, '/')
	b = append(b, monthNames[m-1]...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(y), 10)
	b = append(b, ':')
	b = append2(b, hh)
	b = append(b, ':')
	b = append2(b, mm)
	b = append(b, ':')
	b = append2(b, ss)
	return append(b, " +0000"...)
}

// appendISO writes 2026-01-05T13:55:36.123Z.
func appendISO(b []byte, micros int64) []byte {
	y, m, d, hh, mm, ss := civil(micros / 1e6)
	b = strconv.AppendInt(b, int64(y), 10)
	b = append(b, '-')
	b = append2(b, m)
	b = append(b, '-')
	b = append2(b, d)
	b = append(b, 'T')
	b = append2(b, hh)
	b = append(b, ':')
	b = append2(b, mm)
	b = append(b, ':')
	b = append2(b, ss)
	ms := int(micros % 1e6 / 1000)
	b = append(b, '.', byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10))
	return append(b, 'Z')
}
