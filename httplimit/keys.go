package httplimit

import (
	"fmt"

	"github.com/sluicehq/sluice"
)

// errNoKey: a by-name decision named neither an identity nor anything else
// to key the caller by.
var errNoKey = fmt.Errorf("%w: the caller has no key: give its identity or its client address", sluice.ErrInvalid)

// buildKey writes the store key of the subject's bucket under p and rs
// into kb: the identity rules (an authenticated caller by its identity, an
// anonymous one by its client address).
func (l *Limiter) buildKey(kb *keyBuf, p *policy, rs *ruleSet, s *subject) error {
	if s.authenticated {
		kb.build(p.Name, rs.class, s.caller.ID)
		return nil
	}
	a, ok := s.clientAddr(l)
	if !ok && s.r == nil {
		return errNoKey
	}
	kb.buildAddr(p.Name, rs.class, a)
	return nil
}
