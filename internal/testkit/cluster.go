package testkit

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a JetStream cluster of embedded servers on loopback, for tests
// of R3 streams and of a node lost and brought back. Every node keeps its
// client and route ports and its store for the whole test, so a node killed
// and restarted comes back as the same peer at the same address.
type Cluster struct {
	// Nodes are the servers, in the order of URLs.
	Nodes []*Node
	// URLs is the comma-separated list of the nodes' client URLs: what a
	// process is given so that it reconnects to another node when one goes.
	URLs string
	// Edit, when set, changes a node's options before it starts, and
	// again before it restarts: routes through a network of the test's.
	Edit func(n *Node, opts *server.Options)

	name string
}

// Node is one server of a Cluster.
type Node struct {
	// Name is the server's name, unique in the cluster.
	Name string
	// Dir is the node's store, kept across a restart.
	Dir string
	// Port and ClusterPort are the node's client and route ports.
	Port, ClusterPort int

	c  *Cluster
	mu sync.Mutex
	s  *server.Server
}

// StartCluster starts a cluster of n nodes, waits until it has elected a
// JetStream meta leader, and shuts every node down when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := NewCluster(t, n)
	c.Start(t)
	return c
}

// NewCluster is a cluster of n nodes, their ports and stores chosen, not
// started yet: a test may set Edit, then Start it.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("testkit: a cluster of %d nodes", n)
	}
	ports := freePorts(t, 2*n)
	c := &Cluster{name: "jetloop-test"}
	urls := make([]string, n)
	for i := range n {
		node := &Node{Name: fmt.Sprintf("n%d", i+1), Dir: filepath.Join(t.TempDir(), fmt.Sprintf("n%d", i+1)),
			Port: ports[2*i], ClusterPort: ports[2*i+1], c: c}
		c.Nodes = append(c.Nodes, node)
		urls[i] = node.URL()
	}
	c.URLs = strings.Join(urls, ",")
	return c
}

// Start starts every node, waits until the cluster has elected a JetStream
// meta leader, and shuts every node down when the test ends.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	t.Cleanup(func() {
		for _, node := range c.Nodes {
			node.Kill()
		}
	})
	// Started together: a node waits for its routes before JetStream is up.
	var wg sync.WaitGroup
	errs := make([]error, len(c.Nodes))
	for i, node := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = node.start()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	c.WaitLeader(t)
}

// freePorts picks n distinct free loopback ports, held open together so no
// two are the same, then released for the nodes to bind.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testkit: pick a port: %v", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// URL is the node's client URL.
func (n *Node) URL() string {
	return fmt.Sprintf("nats://127.0.0.1:%d", n.Port)
}

// Connect opens a client connection to this node alone, with opts,
// closed when the test ends.
func (n *Node) Connect(t testing.TB, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return connect(t, n.URL(), opts...)
}

// Server is the node's running server, nil while it is killed.
func (n *Node) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.s
}

func (n *Node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.s != nil {
		return fmt.Errorf("testkit: node %s is running", n.Name)
	}
	var routes []string
	for _, other := range n.c.Nodes {
		if other != n {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", other.ClusterPort))
		}
	}
	opts := &server.Options{
		ServerName: n.Name,
		Host:       "127.0.0.1",
		Port:       n.Port,
		JetStream:  true,
		StoreDir:   n.Dir,
		// As in StartWith: the streams reserve their max_bytes (1 GiB
		// each, on every replica) against these.
		JetStreamMaxStore:  1 << 40,
		JetStreamMaxMemory: 1 << 40,
		Cluster: server.ClusterOpts{
			Name: n.c.name,
			Host: "127.0.0.1",
			Port: n.ClusterPort,
		},
		Routes: server.RoutesFromStr(strings.Join(routes, ",")),
	}
	if n.c.Edit != nil {
		n.c.Edit(n, opts)
	}
	s, err := serve(opts)
	if err != nil {
		return err
	}
	n.s = s
	return nil
}

// Kill shuts the node down at once, without lame duck mode: its clients and
// routes drop, and the other nodes go on without it. It is an in-process
// server, so its stores are closed as a shutdown closes them, not cut off as
// a kill -9 of a process would. Killing a killed node does nothing.
func (n *Node) Kill() {
	n.mu.Lock()
	s := n.s
	n.s = nil
	n.mu.Unlock()
	if s != nil {
		stop(s)
	}
}

// Restart starts a killed node again on its ports and store and waits until
// the cluster has a JetStream meta leader and the node has caught up with
// it.
func (n *Node) Restart(t testing.TB) {
	t.Helper()
	if err := n.start(); err != nil {
		t.Fatal(err)
	}
	n.c.WaitLeader(t)
}

// WaitLeader waits until a running node is the JetStream meta leader and
// every running node follows it.
func (c *Cluster) WaitLeader(t testing.TB) {
	t.Helper()
	WaitFor(t, "the cluster to have a JetStream meta leader that sees every running node", func() bool {
		online, running := -1, 0
		for _, n := range c.Nodes {
			s := n.Server()
			if s == nil {
				continue
			}
			running++
			if !s.JetStreamIsCurrent() {
				return false
			}
			if s.JetStreamIsLeader() {
				// Placing an R3 stream needs every peer online with its
				// stats received, which comes a little after the election.
				online = len(s.JetStreamClusterPeers())
			}
		}
		return running > 0 && online == running
	})
}

// Leader is the node that is the JetStream meta leader now, nil while there
// is none.
func (c *Cluster) Leader() *Node {
	for _, n := range c.Nodes {
		if s := n.Server(); s != nil && s.JetStreamIsLeader() {
			return n
		}
	}
	return nil
}

// Connect opens a client connection to the cluster (any node, and another
// when that one goes), closed when the test ends.
func (c *Cluster) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return connect(t, c.URLs, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
}
