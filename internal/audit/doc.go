// Package audit keeps the append-only, hash-chained record of what was done
// through Airlock: every API mutation, every exec and every file write, with
// who did it, when and the outcome.
//
// # Records and the chain
//
// The API layer hands the Log an Event; the Log turns it into a Record by
// assigning the next sequence number (1, 2, 3... without gaps) and two
// hashes: PrevHash, the Hash of the record before it (64 zeros for Seq 1),
// and Hash, computed as
//
//	Hash = hex(SHA-256(
//	    "airlock-audit-v1\n"            17 bytes, the format version
//	    || PrevHash                     32 bytes (the hex string decoded)
//	    || uint64_be(Seq)               8 bytes
//	    || int64_be(Time)               8 bytes, Unix nanoseconds, UTC
//	    || field(TenantID) || field(KeyID) || field(Action)
//	    || field(Target) || field(Outcome) || field(Details)))
//	field(s) = uint32_be(len(s)) || s   (the UTF-8 bytes of s)
//
// Details is the record's JSON text byte for byte as stored (empty when the
// event had none), never a re-encoding. An outside tool can re-verify a
// database without Airlock, for example in Python:
//
//	prev = "0" * 64
//	for seq, t, ten, key, act, tgt, out, det, ph, h in db.execute(
//	        "SELECT seq, time, tenant_id, key_id, action, target, outcome,"
//	        " details, prev_hash, hash FROM audit_records ORDER BY seq"):
//	    m = b"airlock-audit-v1\n" + bytes.fromhex(prev) + struct.pack(">Qq", seq, t)
//	    for f in (ten, key, act, tgt, out, det):
//	        b = f.encode(); m += struct.pack(">I", len(b)) + b
//	    assert ph == prev and hashlib.sha256(m).hexdigest() == h, seq
//	    prev = h
//
// # Intents and outcomes
//
// The API records every mutation twice, so that a crash between an action
// and its record cannot hide the action:
//
//   - an intent, written and committed before the action is carried out:
//     Outcome "intent" (OutcomeIntent), with who, the target and a
//     summary of the request in Details;
//   - an outcome, written after it: Outcome "ok" or the public error
//     code, with the request summary and the result in Details, which
//     also hold "intent_seq", the Seq of the intent.
//
// The API answers a request only after its outcome is committed. So every
// answered mutation has both records, and an action that was started but
// never answered (the daemon died during it) is an intent that no outcome
// names: Verify counts these as Report.OpenIntents. A request refused
// before anything was done (a bad argument, a missing scope) has a single
// outcome record without "intent_seq". Record.Phase and Record.IntentSeq
// present this reading of Outcome and Details; they are not stored fields
// and the hash does not cover them separately.
//
// # What Verify detects, and what it cannot
//
// Verify walks the chain from Seq 1 and reports the first bad record: an
// edited field (the hash no longer matches), a deleted record (a gap in the
// sequence), reordered or swapped records (a record's Seq or PrevHash no
// longer matches its position), and a deleted tail: the store keeps a head
// anchor (Seq and Hash of the last record) that is updated in the same
// transaction as every append, so records missing after the last one left
// are reported too.
//
// The chain has no secret key. Someone who can write the database file can
// rewrite records, recompute every hash after them and move the anchor, and
// the result verifies; so does a log truncated with its anchor moved back
// to an earlier record, or wiped. These are detectable only against a hash
// kept where that person cannot reach: a checkpoint (below), or
// Report.Head (or any Record's Seq and Hash) saved off the host and passed
// to Verify later. Records are also protected against accidental edits: the
// SQLite store refuses UPDATE and DELETE on them with triggers.
//
// # Checkpoints
//
// A Checkpoint is a head (Seq and Hash) that a daemon signed with its
// ed25519 key (Signer), with the time and the key's ID. The daemon serves
// one on request and appends one to an export file periodically
// (AppendCheckpoint: one JSON object per line), for the operator to ship
// off the host. VerifyCheckpoints reports the chain broken, naming the
// checkpoint, when the record at a checkpoint's Seq has another hash (a
// rewritten chain) or the log ends before it (a truncated or wiped log).
// PublicKey.Verify refuses a checkpoint whose signature does not match its
// fields or that another key signed. The signed message is text:
//
//	airlock-audit-checkpoint-v1\n
//	seq <Seq in decimal>\n
//	hash <Hash>\n
//	time <Time as RFC 3339 UTC, whole seconds: 2026-01-02T15:04:05Z>\n
//	key <KeyID>\n
//
// so that a checkpoint can be verified without Airlock, given the public
// key (PEM, as GET /v1/audit/checkpoint and `airlock audit checkpoint
// --public-key` export it), for example with OpenSSL 3:
//
//	printf 'airlock-audit-checkpoint-v1\nseq %s\nhash %s\ntime %s\nkey %s\n' \
//	    "$seq" "$hash" "$time" "$key_id" > msg
//	printf %s "$signature" | base64 -d > sig
//	openssl pkey -pubin -in audit.pub -outform DER | tail -c 32 | sha256sum | cut -c1-16  # = key_id
//	openssl pkeyutl -verify -pubin -inkey audit.pub -rawin -in msg -sigfile sig
//
// A checkpoint vouches for what the daemon held as its head when it
// signed; it does not vouch for the records before it, which only a walk
// of the chain (against an older checkpoint) does. The key sits in the
// daemon's data directory: whoever can read it can sign checkpoints of a
// rewritten chain, but not take back those already shipped elsewhere.
//
// # Durability and group commit
//
// Append returns only after the record is committed to the store (with
// sqlitestore's defaults: written to the WAL, surviving a kill of the
// daemon; see that package for power loss). An Append that finds the log
// idle commits its own record at once, in its own goroutine. Otherwise it
// queues up, and one writer goroutine commits for everyone waiting: it
// takes every Append in the queue (up to Options.MaxBatch), computes their
// hashes and stores them in a single transaction, then wakes their
// callers. Under concurrency the cost of a commit is shared by the whole
// batch; alone, an Append pays for no goroutine handoff.
//
// # Bounded sizes
//
// Details are encoded as compact JSON with sorted keys. Encodings larger
// than Options.MaxDetailsBytes (16 KiB by default) are replaced by
// {"_truncated":true,"_bytes":N,"_head":"<the first bytes of the JSON>"},
// and details that cannot be encoded by {"_error":"details are not
// JSON-encodable"}, so that an oversized or broken event is still recorded.
// A Target longer than MaxTargetBytes is cut and marked with "...", and
// invalid UTF-8 in it is replaced; every other field must be valid (see
// Append).
package audit
