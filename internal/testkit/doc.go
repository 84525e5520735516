// Package testkit holds no code: its sub-packages are the test
// infrastructure of sluice's tests, apart from the application in
// internal/. None of them is imported by code that ships.
//
//   - fakeclock: a clock that moves only when a test says, for the stores'
//     and the middleware's injectable Now.
//   - syncbuf: a buffer that a test reads while a gateway writes its log.
//   - gatewaytest: start a gateway from YAML, in process, behind httptest
//     servers or on its own listeners.
package testkit
