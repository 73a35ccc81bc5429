// Package archtest holds the tests that keep the code's shape: which
// packages may reach which (the agent, confinement and cgroup code never
// reaches the API, the sandbox manager, the store or SQLite; the runtime
// never reaches the sandbox manager) and that every package says what it
// is in a doc comment. It has no code of its own.
package archtest
