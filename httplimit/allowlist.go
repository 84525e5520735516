package httplimit

import "github.com/sluicehq/sluice/decide"

// Allowlist names callers that no policy limits, such as health checkers
// and internal monitors: their requests pass without a check, without
// RateLimit headers and without counting against anyone's bucket.
//
// A client address is the one ClientIP finds, so only a trusted proxy's
// forwarding header can put a caller in a CIDR; an identity is one that an
// Authenticator verified (or WithIdentity set), never a header the client
// wrote. It is decide.Allowlist.
type Allowlist = decide.Allowlist
