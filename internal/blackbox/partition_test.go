package blackbox

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// network carries a cluster's routes through proxies of the test's, one
// for each ordered pair of nodes, so that a test can cut one node off the
// others on loopback: every connection a node's routes make goes from its
// server to links[from][to], which forwards it to the other's route port.
// A partition blackholes a node's links — they take every byte and pass on
// none, and close nothing, as a network that drops packets — and a heal
// closes what they blackholed (a stream that lost bytes is no protocol
// stream any more) and forwards again, so the servers connect anew.
type network struct {
	links map[[2]int]*link
}

// newNetwork starts the proxies between nodes whose route ports are
// routePorts; they stop when the test ends.
func newNetwork(t *testing.T, routePorts []int) *network {
	t.Helper()
	n := &network{links: map[[2]int]*link{}}
	for from := range routePorts {
		for to, port := range routePorts {
			if from == to {
				continue
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			l := &link{ln: ln, to: fmt.Sprintf("127.0.0.1:%d", port), conns: map[*piped]bool{}}
			t.Cleanup(l.close)
			go l.serve()
			n.links[[2]int{from, to}] = l
		}
	}
	return n
}

// routes are the route URLs node i is given: its links to every other.
func (n *network) routes(i int) []string {
	var out []string
	for k, l := range n.links {
		if k[0] == i {
			out = append(out, "nats-route://"+l.ln.Addr().String())
		}
	}
	return out
}

// partition cuts node i off the others, both ways.
func (n *network) partition(i int) {
	for k, l := range n.links {
		if k[0] == i || k[1] == i {
			l.cut(true)
		}
	}
}

// heal joins node i to the others again.
func (n *network) heal(i int) {
	for k, l := range n.links {
		if k[0] == i || k[1] == i {
			l.cut(false)
		}
	}
}

// link is one proxy: it forwards what connects to ln to the route port to.
type link struct {
	ln net.Listener
	to string

	mu    sync.Mutex
	down  bool
	conns map[*piped]bool
}

// piped is one connection through a link; a blackholed one passes on
// nothing ever again.
type piped struct {
	a, b net.Conn
	mu   sync.Mutex
	dead bool
}

func (p *piped) blackholed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead
}

func (p *piped) close() {
	_ = p.a.Close()
	if p.b != nil {
		_ = p.b.Close()
	}
}

func (l *link) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		go l.handle(c)
	}
}

func (l *link) handle(c net.Conn) {
	l.mu.Lock()
	down := l.down
	l.mu.Unlock()
	p := &piped{a: c, dead: down}
	if !down {
		// A node that is down refuses, as its port would.
		b, err := net.Dial("tcp", l.to)
		if err != nil {
			_ = c.Close()
			return
		}
		p.b = b
	}
	l.mu.Lock()
	if l.conns == nil { // closed
		l.mu.Unlock()
		p.close()
		return
	}
	l.conns[p] = true
	l.mu.Unlock()
	done := make(chan struct{}, 2)
	go l.pipe(p, p.a, p.b, done)
	if p.b != nil {
		go l.pipe(p, p.b, p.a, done)
	}
	<-done
	p.close()
	l.mu.Lock()
	delete(l.conns, p)
	l.mu.Unlock()
}

// pipe copies from to to until either ends, dropping what it reads once
// the connection is blackholed. Without to (a connection made while the
// link was down) it only drops.
func (l *link) pipe(p *piped, from, to net.Conn, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && to != nil && !p.blackholed() {
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut blackholes the link's connections, or closes those it blackholed
// and forwards again.
func (l *link) cut(down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = down
	for p := range l.conns {
		p.mu.Lock()
		if down {
			p.dead = true
		} else if p.dead {
			p.close()
		}
		p.mu.Unlock()
	}
}

func (l *link) close() {
	_ = l.ln.Close()
	l.mu.Lock()
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for p := range conns {
		p.close()
	}
}

// TestNetworkPartitionsANode holds what the chaos soak's partitions rely
// on: with its routes through a network, a node cut off loses the stream
// it led to the others, which go on writing without it, and once healed
// it has every write again.
func TestNetworkPartitionsANode(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster, partitioned")
	}
	c := testkit.NewCluster(t, 3)
	var routePorts []int
	advertise := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		routePorts = append(routePorts, n.ClusterPort)
		advertise[i] = fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	}
	nw := newNetwork(t, routePorts)
	c.Edit = func(n *testkit.Node, opts *server.Options) {
		i := slices.Index(c.Nodes, n)
		// Routes go through the network, and a node advertises an address
		// nothing listens at: the others reach it through the network only.
		opts.Routes = server.RoutesFromStr(strings.Join(nw.routes(i), ","))
		opts.Cluster.Advertise = advertise[i]
	}
	c.Start(t)
	servers := make([]*server.Server, len(c.Nodes))
	js := make([]jetstream.JetStream, len(c.Nodes))
	for i, n := range c.Nodes {
		servers[i] = n.Server()
		// A client of one node only: the node cut off must not reach the
		// others through it.
		_, js[i] = n.Connect(t, nats.NoReconnect())
	}
	testkit.WaitFor(t, "an R3 stream", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := js[0].CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "P", Subjects: []string{"p.>"}, Replicas: 3})
		return err == nil
	})
	leaderOf := func(js jetstream.JetStream) string {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "P")
		if err != nil || s.CachedInfo().Cluster == nil {
			return ""
		}
		return s.CachedInfo().Cluster.Leader
	}
	cut := -1
	testkit.WaitFor(t, "the stream to have a leader", func() bool {
		leader := leaderOf(js[0])
		cut = slices.IndexFunc(servers, func(s *server.Server) bool { return s.Name() == leader })
		return cut >= 0
	})
	other := (cut + 1) % 3
	publish := func(js jetstream.JetStream, i int) error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := js.Publish(ctx, "p.x", fmt.Appendf(nil, "%d", i))
		return err
	}
	nw.partition(cut)
	testkit.WaitFor(t, "the others to elect a leader without the node cut off", func() bool {
		l := leaderOf(js[other])
		return l != "" && l != servers[cut].Name()
	})
	for i := range 10 {
		testkit.WaitFor(t, "a write on the majority's side", func() bool { return publish(js[other], i) == nil })
	}
	if err := publish(js[cut], 99); err == nil {
		t.Error("the node cut off took a write")
	}
	nw.heal(cut)
	testkit.WaitFor(t, "the node healed to hold every write", func() bool {
		jsz, err := servers[cut].Jsz(&server.JSzOptions{Accounts: true, Streams: true})
		if err != nil {
			return false
		}
		for _, a := range jsz.AccountDetails {
			for _, st := range a.Streams {
				if st.Name == "P" && st.State.Msgs >= 10 {
					return true
				}
			}
		}
		return false
	})
}
