package wsproto

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/coder/websocket"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// MaxQueuedMessages bounds what one socket may have waiting to be written.
// A client that falls this far behind is closed with CloseTooSlow rather
// than slowing anyone else down or growing without bound; it may reconnect
// and resubscribe.
const MaxQueuedMessages = 128

// CloseTooSlow closes a socket whose client does not read fast enough
// (1013 Try Again Later: the server is fine, this client fell behind).
const CloseTooSlow = 1013

// DefaultMaxOperations bounds the active operations of one socket when
// Transport.MaxOperations is zero: each holds a goroutine and a
// subscription, so a socket may not open them without limit.
const DefaultMaxOperations = 100

// defaultReadLimit is gqlgen's default for a client message.
const defaultReadLimit = 1 << 20

// offers reports whether the upgrade request lists subprotocol.
func offers(r *http.Request, subprotocol string) bool {
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if strings.TrimSpace(p) == subprotocol {
				return true
			}
		}
	}
	return false
}

// acceptOptions are the configured Implementation's options when it is
// gqlgen's coder/websocket adapter (origin patterns), for graphql-transport-ws.
func (t Transport) acceptOptions() websocket.AcceptOptions {
	var opts websocket.AcceptOptions
	if impl, ok := t.Implementation.(transport.CoderWebsocketImplementation); ok {
		opts = impl.AcceptOptions
	}
	opts.Subprotocols = []string{TransportWS}
	return opts
}

// serve accepts one graphql-transport-ws connection and returns: a
// goroutine of its own reads the socket, so that an idle socket does not
// keep the request's goroutine, whose stack holds every HTTP middleware
// below the handler (16 KiB a socket, as much as the rest of its state).
// A writer goroutine exists only while messages wait to be written.
func (t Transport) serve(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	opts := t.acceptOptions()
	ws, err := websocket.Accept(smallBuffers{w}, r, &opts)
	if err != nil {
		return // Accept answered the request (403 for a refused origin)
	}
	limit := int64(defaultReadLimit)
	if t.PayloadReadLimit != nil {
		limit = *t.PayloadReadLimit
	}
	ws.SetReadLimit(limit)
	// The request's context ends when this handler returns; the
	// connection's ends with the socket.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	s := &session{t: t, exec: exec, ws: ws, header: r.Header, ctx: ctx, ops: map[string]*op{}}
	if t.Stats != nil {
		t.Stats.connections.Add(1)
		t.Stats.track(s)
	}
	initTimeout := t.InitTimeout
	if initTimeout <= 0 {
		initTimeout = DefaultInitTimeout
	}
	s.mu.Lock()
	s.initTimer = time.AfterFunc(initTimeout, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.initSeen {
			s.closeLocked(CloseInitTimeout, "Connection initialisation timeout")
		}
	})
	s.mu.Unlock()
	go s.read(cancel)
}

// Buffer sizes of a socket: coder/websocket keeps the hijacked
// connection's reader and writer for the socket's life, and net/http's are
// 4 KiB each, as much as the rest of an idle socket. Client messages are
// small (a larger frame is read past the buffer); a next message up to
// socketWriteBuffer bytes still leaves in one write.
const (
	socketReadBuffer  = 512
	socketWriteBuffer = 2048
)

// smallBuffers gives coder/websocket smaller buffers than net/http's when
// it hijacks the connection.
type smallBuffers struct{ http.ResponseWriter }

func (w smallBuffers) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil || brw.Reader.Buffered() > 0 {
		return c, brw, err // bytes the client sent early stay where they are
	}
	return c, bufio.NewReadWriter(bufio.NewReaderSize(c, socketReadBuffer), bufio.NewWriterSize(c, socketWriteBuffer)), nil
}

// read reads the socket until the connection ends, then winds the session
// down. Once the socket is closing, reading goes on until the close
// handshake ends the connection; receive ignores what arrives meanwhile.
func (s *session) read(cancel context.CancelFunc) {
	defer func() {
		if v := recover(); v != nil {
			// Outside the request, nothing above recovers: a panic
			// would end the process, so it ends the socket instead.
			if rec, ok := s.exec.(interface {
				PresentRecoveredError(ctx context.Context, err any) error
			}); ok {
				_ = rec.PresentRecoveredError(s.ctx, v)
			}
			_ = s.ws.CloseNow()
		}
		s.shutdown()
		cancel()
		if st := s.t.Stats; st != nil {
			st.untrack(s)
			st.connections.Add(-1)
		}
	}()
	for {
		_, data, err := s.ws.Read(context.Background())
		if err != nil {
			return
		}
		s.receive(data)
	}
}

// session is the server side of one graphql-transport-ws connection.
type session struct {
	t      Transport
	exec   graphql.GraphExecutor
	ws     *websocket.Conn
	header http.Header
	ctx    context.Context // ends with the connection

	mu        sync.Mutex
	initTimer *time.Timer
	pingTimer *time.Timer
	initSeen  bool
	acked     bool
	closing   bool
	// behindSince is when the queue last became half full (zero: it is not).
	behindSince time.Time
	// closeCode and closeReason are sent once the queue is written.
	closeCode   websocket.StatusCode
	closeReason string
	opCtx       context.Context // what InitFunc returned
	ops         map[string]*op  // active operations by the client's id
	queue       [][]byte
	spare       [][]byte
	writing     bool
	pongDue     time.Time // a ping is unanswered until then (zero: none)
}

// op is one active subscribe.
type op struct {
	id     string
	quoted []byte // the id as a JSON string
	ctx    context.Context
	cancel context.CancelFunc
	group  *group // set when it shares an execution
	member *member
}

// receive handles one client message; nothing once the socket is closing.
func (s *session) receive(data []byte) {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return
	}
	m, err := parse(data)
	if err != nil {
		s.close(CloseBadRequest, "Invalid message received: "+err.Error())
		return
	}
	switch m.Type {
	case "connection_init":
		onOwnStack(func() { s.init(m.Payload) })
	case "ping":
		s.send(frame("pong", nil, m.Payload))
	case "pong":
		s.mu.Lock()
		s.pongDue = time.Time{}
		s.mu.Unlock()
	case "subscribe":
		s.mu.Lock()
		if !s.acked {
			s.closeLocked(CloseUnauthorized, "Unauthorized")
			s.mu.Unlock()
			return
		}
		if _, ok := s.ops[m.ID]; ok {
			s.closeLocked(CloseSubscriberAlreadyExists, "Subscriber for "+m.ID+" already exists")
			s.mu.Unlock()
			return
		}
		quoted, _ := json.Marshal(m.ID)
		if limit := s.t.maxOperations(); len(s.ops) >= limit {
			// Refused like any operation, with an error message: the
			// socket and its other operations go on.
			payload, _ := json.Marshal(gqlerror.List{{Message: fmt.Sprintf("at most %d operations may be active on one socket", limit),
				Extensions: map[string]any{"code": "TOO_MANY_OPERATIONS"}}})
			s.sendLocked(frame("error", quoted, payload))
			s.mu.Unlock()
			return
		}
		o := &op{id: m.ID, quoted: quoted}
		o.ctx, o.cancel = context.WithCancel(s.opCtx)
		s.ops[m.ID] = o
		s.mu.Unlock()
		go s.start(o, m.Payload)
	case "complete":
		s.mu.Lock()
		o := s.ops[m.ID]
		if o != nil {
			delete(s.ops, m.ID)
		}
		s.mu.Unlock()
		if o != nil {
			s.stop(o)
		}
	}
}

// onOwnStack runs f on a goroutine of its own and waits for it; a panic
// in f goes on in the caller. The InitFunc (checking a token) runs deep:
// on the reader, the stack it grew would stay with the socket for its life.
func onOwnStack(f func()) {
	var panicked any
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { panicked = recover() }()
		f()
	}()
	<-done
	if panicked != nil {
		panic(panicked)
	}
}

// init runs the InitFunc for the first connection_init.
func (s *session) init(payload json.RawMessage) {
	s.mu.Lock()
	if s.initSeen {
		s.closeLocked(CloseTooManyInitRequests, "Too many initialisation requests")
		s.mu.Unlock()
		return
	}
	s.initSeen = true
	s.initTimer.Stop()
	s.mu.Unlock()

	var p transport.InitPayload
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, &p); err != nil {
			s.close(CloseBadRequest, "Invalid message received: connection_init payload")
			return
		}
	}
	ctx := s.ctx
	var ack *transport.InitPayload
	if s.t.InitFunc != nil {
		var err error
		ctx, ack, err = s.t.InitFunc(ctx, p)
		var ce *CloseError
		if errors.As(err, &ce) {
			s.close(websocket.StatusCode(ce.Code), ce.Reason)
			return
		}
		if err != nil {
			s.close(CloseForbidden, "Forbidden")
			return
		}
	}
	var ackPayload []byte
	if ack != nil && *ack != nil {
		ackPayload, _ = json.Marshal(*ack)
	}
	s.mu.Lock()
	s.opCtx = ctx
	s.acked = true
	s.sendLocked(frame("connection_ack", nil, ackPayload))
	if iv := s.t.PingPongInterval; iv > 0 {
		s.pingTimer = time.AfterFunc(iv, s.ping)
	}
	s.mu.Unlock()
	// The connection lives as long as InitFunc's context: when it ends
	// with a CloseError cause (WithExpiry), the socket closes with its code.
	context.AfterFunc(ctx, func() {
		var ce *CloseError
		if errors.As(context.Cause(ctx), &ce) {
			s.close(websocket.StatusCode(ce.Code), ce.Reason)
			return
		}
		s.close(websocket.StatusNormalClosure, "")
	})
}

// ping sends a keep-alive ping; a client that left the previous one
// unanswered for two intervals is gone and its socket is closed.
func (s *session) ping() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return
	}
	now := time.Now()
	if !s.pongDue.IsZero() && now.After(s.pongDue) {
		s.closeLocked(websocket.StatusGoingAway, "no pong")
		return
	}
	iv := s.t.PingPongInterval
	if s.pongDue.IsZero() {
		s.pongDue = now.Add(2 * iv)
	}
	s.sendLocked(frame("ping", nil, nil))
	s.pingTimer.Reset(iv)
}

// start prepares the operation and runs it, on its own or shared.
func (s *session) start(o *op, payload json.RawMessage) {
	var params graphql.RawParams
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber() // as gqlgen: variables keep their exact numbers
	if err := dec.Decode(&params); err != nil {
		s.fail(o, gqlerror.List{{Message: "invalid json"}})
		return
	}
	params.Headers = s.header
	params.ReadTime = graphql.TraceTiming{Start: graphql.Now(), End: graphql.Now()}
	ctx := graphql.StartOperationTrace(o.ctx)
	rc, errs := s.exec.CreateOperationContext(ctx, &params)
	if errs != nil {
		s.fail(o, s.exec.DispatchError(graphql.WithOperationContext(ctx, rc), errs).Errors)
		return
	}
	ctx = graphql.WithOperationContext(ctx, rc)
	if rc.Operation.Operation == ast.Subscription && s.t.Share != nil {
		key, err := s.t.Share.Key(ctx, rc)
		if err != nil {
			s.fail(o, s.exec.DispatchError(ctx, gqlerror.List{gqlerror.WrapIfUnwrapped(err)}).Errors)
			return
		}
		if key != "" {
			s.t.Share.join(key, s, o, ctx, rc)
			return
		}
	}
	s.run(o, ctx, rc)
}

// run executes an operation for this socket alone.
func (s *session) run(o *op, ctx context.Context, rc *graphql.OperationContext) {
	execute(ctx, s.exec, rc, func(payload []byte) bool {
		s.pace()
		return s.deliver(o, payload)
	}, func(errPayload []byte) {
		s.end(o, errPayload)
		o.cancel()
	})
}

// execute runs an operation and hands each encoded result to emit until the
// stream ends or emit returns false; then done gets nil when the operation
// completed, or the errors that end it instead: a first result with errors
// and no data at all (the operation failed before producing anything,
// which graphql-transport-ws sends as an error message), or a panic.
//
// A subscription whose resolver claims the operation's Pull holds no
// goroutine while it waits: execute returns once the resolver has run, and
// each result is produced on the goroutine that calls Ready. Otherwise the
// calling goroutine produces the results until the stream ends.
func execute(ctx context.Context, exec graphql.GraphExecutor, rc *graphql.OperationContext, emit func(payload []byte) bool, done func(errPayload []byte)) {
	p := &Pull{}
	ctx = context.WithValue(ctx, pullKey{}, p)
	var (
		responses graphql.ResponseHandler
		rctx      context.Context
	)
	if errPayload := protect(ctx, rc, func() { responses, rctx = exec.DispatchOperation(ctx, rc) }); errPayload != nil {
		done(errPayload)
		return
	}
	first := true
	step := func() bool {
		var resp *graphql.Response
		if errPayload := protect(rctx, rc, func() { resp = responses(rctx) }); errPayload != nil {
			done(errPayload)
			return false
		}
		if resp == nil {
			done(nil)
			return false
		}
		wasFirst := first
		first = false
		if wasFirst && len(resp.Errors) > 0 && (len(resp.Data) == 0 || string(resp.Data) == "null") {
			errPayload, _ := json.Marshal(resp.Errors)
			done(errPayload)
			return false
		}
		payload, err := json.Marshal(resp)
		if err != nil {
			errPayload, _ := json.Marshal(gqlerror.List{{Message: "internal error"}})
			done(errPayload)
			return false
		}
		if !emit(payload) {
			done(nil)
			return false
		}
		return true
	}
	p.mu.Lock()
	claimed := p.claimed
	p.step = step
	p.mu.Unlock()
	if !claimed {
		for step() {
		}
		return
	}
	p.start() // results whose Ready came while the resolver ran
}

// protect runs f and returns a panic in it as an error payload (nil: none).
func protect(ctx context.Context, rc *graphql.OperationContext, f func()) (errPayload []byte) {
	defer func() {
		if r := recover(); r != nil {
			errPayload, _ = json.Marshal(gqlerror.List{gqlerror.WrapIfUnwrapped(rc.Recover(ctx, r))})
		}
	}()
	f()
	return nil
}

// pullKey carries an execution's *Pull to its subscription resolver.
type pullKey struct{}

// Pull lets a subscription resolver drive its operation, so that an idle
// subscription holds no goroutine here: an operation blocked reading its
// resolver's channel held one (8-16 KiB of stack, gqlgen's execution runs
// deep) for every distinct subscription. A resolver that claims the Pull
// calls Ready after each value it sends on its channel and after closing
// it; the result for that value is then produced and queued on the calling
// goroutine.
type Pull struct {
	mu      sync.Mutex
	claimed bool
	step    func() bool // one result; false once the operation is over. Nil until the resolver returned.
	pending int         // values sent and not yet turned into results
	running bool        // a goroutine is producing results
	over    bool
}

// PullFrom returns the Pull of the operation that ctx runs, or nil when the
// operation is not served by this package's graphql-transport-ws.
func PullFrom(ctx context.Context) *Pull {
	p, _ := ctx.Value(pullKey{}).(*Pull)
	return p
}

// Claim says that the resolver will call Ready after each value it sends
// on the channel it returns, and after closing it. Call it before returning
// the channel, and only then: nothing reads the channel otherwise.
func (p *Pull) Claim() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.claimed = true
}

// Ready produces the result for a value just sent (or the close), here or
// on the goroutine already producing results; results keep their order.
func (p *Pull) Ready() {
	p.mu.Lock()
	p.pending++
	p.mu.Unlock()
	p.start()
}

func (p *Pull) start() {
	p.mu.Lock()
	if p.running || p.step == nil || p.over {
		p.mu.Unlock()
		return
	}
	p.running = true
	p.mu.Unlock()
	for {
		p.mu.Lock()
		if p.pending == 0 || p.over {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.pending--
		p.mu.Unlock()
		if !p.step() {
			p.mu.Lock()
			p.over, p.running = true, false
			p.mu.Unlock()
			return
		}
	}
}

// deliver sends one result of o as a next message; false when o is over.
func (s *session) deliver(o *op, payload []byte) bool {
	return s.queueNext(o, frame("next", o.quoted, payload))
}

// queueNext queues msg, a next message of o that other sockets may share
// (it is never modified), unless o is over; false when it is.
func (s *session) queueNext(o *op, msg []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.activeLocked(o) {
		return false
	}
	s.sendLocked(msg)
	return true
}

// pace waits while the socket's queue is half full, so that a socket's own
// execution (never a shared one, which serves many sockets) keeps pace with
// a client that reads: a replay of thousands of events is not a reason to
// close. Waiting holds nothing but this execution. Once the client has been
// that far behind for the transport's SlowClientWait, results go on piling
// up and the queue's limit closes the socket with CloseTooSlow.
func (s *session) pace() {
	for {
		s.mu.Lock()
		busy := len(s.queue) >= MaxQueuedMessages/2 && !s.closing
		switch {
		case !busy:
			s.behindSince = time.Time{}
		case s.behindSince.IsZero():
			s.behindSince = time.Now()
		}
		gaveUp := busy && time.Since(s.behindSince) > s.t.slowClientWait()
		s.mu.Unlock()
		if !busy || gaveUp {
			return
		}
		time.Sleep(500 * time.Microsecond)
	}
}

// activeLocked reports whether o may still send. Once the connection's
// context has ended the socket is closing: the operations it cancelled
// must not look completed to the client (it resubscribes after reconnecting).
func (s *session) activeLocked(o *op) bool {
	return s.ops[o.id] == o && !s.closing && s.opCtx.Err() == nil
}

// fail ends o with an error message.
func (s *session) fail(o *op, errs gqlerror.List) {
	payload, _ := json.Marshal(errs)
	o.cancel()
	s.end(o, payload)
}

// end ends o, if it is still active, with an error message carrying
// errPayload, or with complete when that is nil (its stream ended on the
// server's side).
func (s *session) end(o *op, errPayload []byte) {
	msg := frame("complete", o.quoted, nil)
	if errPayload != nil {
		msg = frame("error", o.quoted, errPayload)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.activeLocked(o) {
		return
	}
	delete(s.ops, o.id)
	s.sendLocked(msg)
}

// stop ends o for the client's complete or the socket's end.
func (s *session) stop(o *op) {
	o.cancel()
	s.mu.Lock()
	g, m := o.group, o.member
	s.mu.Unlock()
	if g != nil {
		g.leave(m)
	}
}

// frame encodes a server message; id and payload are JSON or nil.
func frame(typ string, id, payload []byte) []byte {
	b := make([]byte, 0, len(`{"type":"","id":,"payload":}`)+len(typ)+len(id)+len(payload))
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, '"')
	if id != nil {
		b = append(b, `,"id":`...)
		b = append(b, id...)
	}
	if payload != nil {
		b = append(b, `,"payload":`...)
		b = append(b, payload...)
	}
	return append(b, '}')
}

func (s *session) send(msg []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sendLocked(msg)
}

// sendLocked queues msg and makes sure a writer is running.
func (s *session) sendLocked(msg []byte) {
	if s.closing {
		return
	}
	if len(s.queue) >= MaxQueuedMessages {
		s.queue = nil // not worth delivering late: the client resubscribes
		if s.t.Stats != nil {
			s.t.Stats.slowCloses.Add(1)
		}
		s.closeLocked(CloseTooSlow, "Subscriber too slow")
		return
	}
	s.queue = append(s.queue, msg)
	if !s.writing {
		s.writing = true
		go s.write()
	}
}

// write drains the queue and exits when it is empty.
func (s *session) write() {
	for {
		s.mu.Lock()
		batch := s.queue
		if len(batch) == 0 {
			s.writing = false
			code, reason, closing := s.closeCode, s.closeReason, s.closing
			s.mu.Unlock()
			if closing && code != 0 {
				_ = s.ws.Close(code, reason)
			}
			return
		}
		s.queue = s.spare[:0]
		s.mu.Unlock()
		for i, msg := range batch {
			if err := s.ws.Write(context.Background(), websocket.MessageText, msg); err != nil {
				s.mu.Lock()
				s.queue, s.writing = nil, false
				s.mu.Unlock()
				_ = s.ws.CloseNow()
				return
			}
			batch[i] = nil
		}
		s.mu.Lock()
		s.spare = batch[:0]
		s.mu.Unlock()
	}
}

func (s *session) close(code websocket.StatusCode, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked(code, reason)
}

// closeLocked starts the close handshake once, after what is already
// queued (an error message, say); the reader then sees the connection end
// and shuts the session down.
func (s *session) closeLocked(code websocket.StatusCode, reason string) {
	if s.closing {
		return
	}
	s.closing = true
	s.closeCode, s.closeReason = code, truncate(reason, 123)
	if s.initTimer != nil {
		s.initTimer.Stop()
	}
	if s.pingTimer != nil {
		s.pingTimer.Stop()
	}
	if !s.writing {
		go func() { _ = s.ws.Close(code, s.closeReason) }()
		return
	}
	// The writer closes after the queue; a client that stopped reading
	// would keep it waiting forever.
	time.AfterFunc(closeGrace, func() { _ = s.ws.CloseNow() })
}

// closeGrace is how long a close may wait for queued messages to be written.
const closeGrace = 5 * time.Second

// shutdown stops every operation once the connection is gone.
func (s *session) shutdown() {
	s.mu.Lock()
	s.closing = true
	if s.initTimer != nil {
		s.initTimer.Stop()
	}
	if s.pingTimer != nil {
		s.pingTimer.Stop()
	}
	ops := s.ops
	s.ops = map[string]*op{}
	s.queue = nil
	s.mu.Unlock()
	for _, o := range ops {
		s.stop(o)
	}
	_ = s.ws.CloseNow()
}

// Sharing lets sockets that subscribe with the same operation, variables
// and rights share one execution: each event is resolved and encoded once
// and the same bytes go to every socket. Without it, 1,000 subscribers to
// one mount would run the same selection set 1,000 times per event.
type Sharing struct {
	// Key returns the key under which the operation may be shared, or ""
	// to run it for this socket alone. It is called for every subscribe and
	// must check the caller's rights, since a socket that joins a running
	// execution does not run the resolver itself: an error refuses the
	// operation as a resolver's would. Operations with equal keys must
	// produce the same results for every caller.
	Key func(ctx context.Context, op *graphql.OperationContext) (string, error)

	mu     sync.Mutex
	groups map[string]*group
}

// NewSharing returns a Sharing with the given key function.
func NewSharing(key func(ctx context.Context, op *graphql.OperationContext) (string, error)) *Sharing {
	return &Sharing{Key: key, groups: map[string]*group{}}
}

// Executions returns how many shared executions are running (for metrics and tests).
func (sh *Sharing) Executions() int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.groups)
}

// Subscribers returns how many operations take part in shared executions.
func (sh *Sharing) Subscribers() int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	for _, g := range sh.groups {
		g.mu.Lock()
		n += len(g.members)
		g.mu.Unlock()
	}
	return n
}

// group is one shared execution and the sockets it feeds.
type group struct {
	sh     *Sharing
	key    string
	cancel context.CancelFunc

	mu      sync.Mutex
	ended   bool
	members map[*member]struct{}
}

type member struct {
	s *session
	o *op
}

// join adds o to the execution under key, starting it when there is none.
// The execution runs in the context of the socket that starts it, detached
// from that socket's end: it stops when its last member leaves.
func (sh *Sharing) join(key string, s *session, o *op, ctx context.Context, rc *graphql.OperationContext) {
	m := &member{s: s, o: o}
	s.mu.Lock()
	o.member = m
	s.mu.Unlock()

	sh.mu.Lock()
	g := sh.groups[key]
	if g != nil {
		g.mu.Lock()
		if !g.ended {
			g.members[m] = struct{}{}
			g.mu.Unlock()
			sh.mu.Unlock()
			s.joined(o, g)
			return
		}
		g.mu.Unlock()
	}
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g = &group{sh: sh, key: key, cancel: cancel, members: map[*member]struct{}{m: {}}}
	sh.groups[key] = g
	sh.mu.Unlock()
	s.joined(o, g)
	go g.run(gctx, s.exec, rc)
}

// joined records o's group, or leaves it again when o already stopped.
func (s *session) joined(o *op, g *group) {
	s.mu.Lock()
	o.group = g
	active := s.activeLocked(o)
	s.mu.Unlock()
	if !active {
		g.leave(o.member)
	}
}

func (g *group) run(ctx context.Context, exec graphql.GraphExecutor, rc *graphql.OperationContext) {
	execute(ctx, exec, rc, g.broadcast, g.end)
}

// broadcast queues one encoded result on every member's socket. Members
// whose operations have the same id (clients number them alike: "1") get
// the very same message bytes: an event costs one message per distinct id,
// not one per socket.
func (g *group) broadcast(payload []byte) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	var (
		firstID, first []byte
		others         map[string][]byte
	)
	for m := range g.members {
		id := m.o.quoted
		var msg []byte
		switch {
		case first == nil:
			firstID, first = id, frame("next", id, payload)
			msg = first
		case bytes.Equal(id, firstID):
			msg = first
		default:
			msg = others[string(id)]
			if msg == nil {
				if others == nil {
					others = map[string][]byte{}
				}
				msg = frame("next", id, payload)
				others[string(id)] = msg
			}
		}
		m.s.queueNext(m.o, msg)
	}
	return !g.ended
}

// end stops the group: its members get errPayload as an error message, or
// complete when it is nil.
func (g *group) end(errPayload []byte) {
	g.mu.Lock()
	g.ended = true
	members := g.members
	g.members = map[*member]struct{}{}
	g.mu.Unlock()
	g.cancel()
	g.sh.remove(g)
	for m := range members {
		m.s.end(m.o, errPayload)
	}
}

// leave removes m; the last member to leave stops the execution.
func (g *group) leave(m *member) {
	g.mu.Lock()
	delete(g.members, m)
	last := len(g.members) == 0 && !g.ended
	if last {
		g.ended = true
	}
	g.mu.Unlock()
	if last {
		g.cancel()
		g.sh.remove(g)
	}
}

func (sh *Sharing) remove(g *group) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.groups[g.key] == g {
		delete(sh.groups, g.key)
	}
}

// Stats counts what an operator watches on the graphql-transport-ws side;
// a Transport with Stats set keeps it up to date. Safe for concurrent use.
type Stats struct {
	connections atomic.Int64
	slowCloses  atomic.Int64
	share       atomic.Pointer[Sharing]

	mu       sync.Mutex
	sessions map[*session]struct{}
	gone     chan struct{} // closed when the last session of a GoingAway ends
}

func (st *Stats) track(s *session) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sessions == nil {
		st.sessions = map[*session]struct{}{}
	}
	st.sessions[s] = struct{}{}
}

func (st *Stats) untrack(s *session) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.sessions, s)
	if len(st.sessions) == 0 && st.gone != nil {
		close(st.gone)
		st.gone = nil
	}
}

// GoingAway closes every graphql-transport-ws socket with 1001 (going
// away) and no complete message, so that clients reconnect and resubscribe
// (to another replica, or this one restarted), and waits until they are
// closed or ctx ends. A server calls it when it shuts down.
func (st *Stats) GoingAway(ctx context.Context) {
	st.mu.Lock()
	sessions := make([]*session, 0, len(st.sessions))
	for s := range st.sessions {
		sessions = append(sessions, s)
	}
	var gone chan struct{}
	if len(sessions) > 0 {
		if st.gone == nil {
			st.gone = make(chan struct{})
		}
		gone = st.gone
	}
	st.mu.Unlock()
	for _, s := range sessions {
		s.close(websocket.StatusGoingAway, "server shutting down")
	}
	if gone == nil {
		return
	}
	select {
	case <-gone:
	case <-ctx.Done():
	}
}

// Observe makes the shared-execution figures come from sh.
func (st *Stats) Observe(sh *Sharing) { st.share.Store(sh) }

// Connections returns the open graphql-transport-ws connections.
func (st *Stats) Connections() int64 { return st.connections.Load() }

// SlowCloses returns how many connections were closed with CloseTooSlow.
func (st *Stats) SlowCloses() int64 { return st.slowCloses.Load() }

// SharedExecutions returns the running shared executions.
func (st *Stats) SharedExecutions() int {
	if sh := st.share.Load(); sh != nil {
		return sh.Executions()
	}
	return 0
}

// SharedSubscribers returns the operations fed by shared executions.
func (st *Stats) SharedSubscribers() int {
	if sh := st.share.Load(); sh != nil {
		return sh.Subscribers()
	}
	return 0
}
