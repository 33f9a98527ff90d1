// Package client submits jetloop turns, follows their events and steers
// them, from any Go program, over a NATS connection.
//
//	c, err := client.New(nc)
//	if err != nil { ... }
//	id, err := c.Submit(ctx, client.TurnRequest{Agent: "Refactorer", Input: client.Text("Rename Foo to Bar")})
//	if err != nil { ... }
//	for ev, err := range c.Watch(ctx, id) {
//		if err != nil { ... }
//		switch e := ev.(type) {
//		case client.ToolCompleted:
//			fmt.Println("tool", e.Name, "→", e.Output)
//		case client.TurnPaused:
//			if e.Kind == client.PauseInput {
//				err = c.Reply(ctx, id, e.CallID, ask(e.Question))
//			}
//		case client.TurnFinished:
//			fmt.Println(e.StopReason, e.Output)
//		}
//	}
//
// A turn's log is the truth: Watch and Events decode it into one Go type
// per event type (TurnStarted … TurnFinished), Wait returns its
// TurnFinished, and Turns and Turn describe turns at a glance. Log, Last
// and FollowLog read the same log as it is stored, a Record per event, to
// export it or fold it elsewhere; OpenFeed reads many logs at once (every
// turn's, or a session's) as they are written.
// StreamDeltas follows the model's text as it is written, which the log
// does not keep. Abort, Reply, Approve and Deny steer a turn; each checks
// first that the turn can take it, and says why not (ErrTurnNotFound,
// ErrTurnFinished, ErrNotWaiting).
//
// The client writes only what a client of docs/protocol.md may (submit and
// control messages) and reads the events stream; it runs as the client role
// of the shipped nats.conf.
package client
