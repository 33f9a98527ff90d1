// Package worker serves tools to jetloop turns from any Go program: a tool is
// a name, a description, a JSON Schema of its arguments and a function, and
// the orchestrator offers it to models as soon as a worker runs it.
//
//	w, err := worker.New(nc, worker.WithName("billing-1"))
//	if err != nil { ... }
//	type lookup struct {
//		Customer string `json:"customer" description:"the customer id, e.g. C-42"`
//	}
//	err = worker.HandleFunc(w, "invoice_total", "Returns a customer's open invoice total.",
//		func(ctx context.Context, a lookup) (worker.Result, error) {
//			total, err := billing.OpenTotal(ctx, a.Customer)
//			if err != nil {
//				return worker.Result{}, err // the model sees the error
//			}
//			return worker.Result{Output: total.String()}, nil
//		})
//	if err != nil { ... }
//	err = w.Run(ctx) // until ctx ends
//
// A Worker is the same runtime as the stock toolworker command, with the
// same guarantees:
//
//   - One durable consumer per tool, tool_<name>, shared by every worker of
//     the tool: run more processes for more capacity.
//   - Each of a tool's slots (WithConcurrency) pulls a job only when it is
//     free, so no job waits in a buffer while its ack timer runs.
//   - A running call is heartbeated (InProgress) every third of the ack wait
//     (WithAckWait); a worker that dies loses its jobs to another after it.
//   - A call's context ends at the job's deadline, when its turn is aborted
//     (jetloop.cancel.<turn_id>), and the drain grace (WithDrainGrace) after Run's context ends.
//   - Arguments are checked against the tool's schema before the function
//     sees them; invalid arguments, a returned error and a panic become error
//     results the model reads, and an output over MaxOutput is cut.
//   - A job that is not valid JSON or names another tool is a dead letter
//     (jetloop.dead.job), answered with an error result when it names its
//     call; a job delivered as often as WithMaxDeliver allows is answered with an error.
//   - A result is published (with Nats-Msg-Id result:<call_id>) before its
//     job is acknowledged.
//   - The tools are advertised in KV JETLOOP_TOOLS, with the number of live
//     workers counted in KV JETLOOP_WORKERS, while Run runs, and withdrawn
//     when it returns.
//
// Any process that speaks the two JSON messages of docs/protocol.md (tool job,
// tool result) is a worker too; this package is the Go one.
package worker
