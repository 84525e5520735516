package decide

import "github.com/sluicehq/sluice"

// Class is the key class of a caller under a policy: which of the
// policy's rule lists it is checked against, and part of its store key.
type Class uint8

const (
	Anonymous     Class = iota // no verified identity: keyed by client address
	Authenticated              // a verified identity: keyed by it
	Override                   // an identity with rules of its own
	Plan                       // an identity whose plan has rules of its own
)

var classNames = [...]string{"anonymous", "authenticated", "override", "plan"}

// String is the class as the access log and traces name it.
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return ""
}

// classKeys are the bytes that stand for the classes in store keys. They
// are part of every key that Redis or memory holds, so they never change:
// buckets survive an upgrade (see the golden keys test of httplimit).
var classKeys = [...]byte{'a', 'u', 'o', 'p'}

// KeyByte is the byte that stands for c in store keys.
func (c Class) KeyByte() byte { return classKeys[c] }

// Rules is the rule set one class of caller of a policy is checked
// against, with its RateLimit field values, rendered once.
type Rules struct {
	Rules []sluice.Rule
	Class Class
	Plan  string // the plan, for class Plan: part of the key
	QuotaFields
}
