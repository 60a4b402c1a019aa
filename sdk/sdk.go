// Package sdk is the mobile-client library of mountd: with an API base
// address and a scoped token (never client credentials) it scans for mounts
// over BLE, connects to them, and carries signed commands from the API to a
// mount, checking the token with the identity provider first and carrying
// what the mount says back to the API unchanged: its signed receipt for the
// command and its signed states.
//
// Two streams report what happens: EngineEvents (global: scans, connections,
// errors) and DeviceStates (per mount uid: states and command results).
//
// Uploads the API cannot take now (no network, 5xx) wait in a bounded
// on-disk queue the app names (Config.QueueDir) and go up oldest first,
// item by item, when the API answers again, also after the app restarts;
// Flush uploads now, Queued says what waits.
//
// Offline access: with a grant keeper (Config.GrantDir or Config.Keeper)
// the phone holds grants (RequestGrant, RefreshGrants) and ReleaseHelmet
// uses the mount's grant when the API does not answer (a network error,
// a 5xx, a 401; never a 403 or 404): the mount judges it alone and signs
// an offline receipt. Every connection writes a time token and the newest
// revocation list to the mount; every action carries the mount's log of
// offline receipts to the API and writes back its ack (UploadPending does
// it alone).
package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
)

// Config configures a Client.
type Config struct {
	// BaseURL is the API base address, ending in /api/v1.
	BaseURL string
	// Token is a scoped access token, typically role:restricted with one
	// mount:<uid> item, obtained by the operator's server.
	Token string
	// TokenSource, instead of Token, gives the access token of each call:
	// for an app that keeps its Client longer than a token lives (a
	// phone's shift). A renewed token applies from the next call, uploads
	// waiting in the queue included; a source with a Forget method (such
	// as the client package's Credentials) is asked again once when the
	// API refuses its token. The source is called often: it should keep
	// its token until shortly before it expires (oauth2.ReuseTokenSource).
	TokenSource oauth2.TokenSource
	// Radio is the BLE adapter: real BLE or the simulated radio.
	Radio Radio
	// HTTPClient defaults to a client with a 15 s timeout.
	HTTPClient *http.Client
	// ConfirmTimeout bounds the wait for a mount to confirm a command
	// (default 10 s).
	ConfirmTimeout time.Duration
	// RestartWait bounds the wait for a mount to come back on the new
	// revision after a firmware install (InstallFirmware, Sync; default
	// 30 s); WithRestartWait overrides it for one install.
	RestartWait time.Duration
	// ReconnectWait bounds one reconnection during a firmware install
	// (after a lost link, after the restart), whatever the caller's
	// context; each connection attempt within it is bounded by
	// ConfirmTimeout (default 30 s).
	ReconnectWait time.Duration

	// QueueDir is the directory of the upload queue: what the mount said
	// (signed states, receipts) that could not reach the API waits there,
	// across restarts of the app, and is uploaded oldest first when the API
	// answers again. One Client at a time may use a directory. Empty: no
	// queue; an upload that fails is returned as the action's error and
	// not kept.
	QueueDir string
	// QueueMaxItems and QueueMaxBytes bound the queue (defaults 1000 items
	// and 8 MiB). When full, a new item is refused (ErrQueueFull, in the
	// action's error); the items already queued stay.
	QueueMaxItems int
	QueueMaxBytes int64
	// RetryMin and RetryMax bound the wait between the background
	// flusher's attempts while the API does not answer: it doubles from
	// RetryMin (default 1 s) up to RetryMax (default 5 min), with jitter.
	RetryMin, RetryMax time.Duration
	// UploadWait bounds how long an action waits for its own uploads
	// before leaving them to the queue (default 10 s).
	UploadWait time.Duration
	// Logger receives the queue's log lines (dropped uploads, retries);
	// default slog.Default().
	Logger *slog.Logger

	// GrantDir is the directory of the phone's offline material (its
	// rider key, grants and revocation lists): NewFileKeeper(GrantDir).
	GrantDir string
	// Keeper keeps the offline material instead (a phone's secure
	// hardware); it overrides GrantDir. Neither: no offline access.
	Keeper GrantKeeper
}

// Client is one phone's view of the fleet.
type Client struct {
	cfg    Config
	api    *apiClient
	engine *broadcaster[EngineEvent]
	up     *uploader
	keeper GrantKeeper // nil: no offline access
	acks   *heldAcks   // the API's acks of offline receipts, not yet written

	bgCtx    context.Context // background refreshes of revocation lists
	bgCancel context.CancelFunc
	bg       sync.WaitGroup

	mu         sync.Mutex
	seen       map[string]protocol.BLEDevice // uid → last advertisement
	devices    map[string]*device
	closed     bool
	listsAt    time.Time // the last refresh of the revocation lists
	refreshing bool      // one under way
}

// Errors an action can return; wrap-aware (errors.Is).
var (
	// ErrTokenRejected: the identity provider does not accept the token
	// (invalid, expired, or lacking a mandatory scope item).
	ErrTokenRejected = errors.New("sdk: the identity provider rejected the token")
	// ErrMountNotAllowed: the token's scope does not cover this mount.
	ErrMountNotAllowed = errors.New("sdk: the token does not allow this mount")
	// ErrNotConnected: Connect the mount first.
	ErrNotConnected = errors.New("sdk: not connected to this mount")
	// ErrNotFound: no mount with this uid was seen in a scan.
	ErrNotFound = errors.New("sdk: mount not found nearby")
	// ErrTimeout: the mount did not confirm in time.
	ErrTimeout = errors.New("sdk: the mount did not confirm in time")
	// ErrClosed: the client is closed.
	ErrClosed = errors.New("sdk: client closed")
)

// RefusedError is returned when the mount refuses a command.
type RefusedError struct {
	Code   string
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("sdk: the mount refused %s: %s", e.Code, e.Reason)
}

// New returns a Client. With a QueueDir, it opens the queue and starts
// uploading what an earlier run left there.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" || (cfg.Token == "") == (cfg.TokenSource == nil) || cfg.Radio == nil {
		return nil, errors.New("sdk: BaseURL, Radio and one of Token and TokenSource are required")
	}
	if cfg.TokenSource == nil {
		cfg.TokenSource = client.StaticToken(cfg.Token)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 15 * time.Second}
	}
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = 10 * time.Second
	}
	if cfg.RestartWait <= 0 {
		cfg.RestartWait = 30 * time.Second
	}
	if cfg.ReconnectWait <= 0 {
		cfg.ReconnectWait = 30 * time.Second
	}
	if cfg.QueueMaxItems <= 0 {
		cfg.QueueMaxItems = 1000
	}
	if cfg.QueueMaxBytes <= 0 {
		cfg.QueueMaxBytes = 8 << 20
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = time.Second
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(cfg.RetryMin, 5*time.Minute)
	}
	if cfg.UploadWait <= 0 {
		cfg.UploadWait = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	c := &Client{
		cfg:     cfg,
		api:     newAPIClient(cfg.BaseURL, cfg.TokenSource, cfg.HTTPClient),
		engine:  newBroadcaster[EngineEvent](nil),
		seen:    map[string]protocol.BLEDevice{},
		devices: map[string]*device{},
	}
	c.keeper = cfg.Keeper
	if c.keeper == nil && cfg.GrantDir != "" {
		var err error
		if c.keeper, err = NewFileKeeper(cfg.GrantDir); err != nil {
			return nil, err
		}
	}
	var q *queue
	if cfg.QueueDir != "" {
		var err error
		if q, err = openQueue(cfg.QueueDir, cfg.QueueMaxItems, cfg.QueueMaxBytes); err != nil {
			return nil, err
		}
	}
	// The acks live beside the queue, under its lock; the flusher may
	// bring new ones from its first round.
	c.acks = openAcks(cfg.QueueDir, cfg.Logger)
	c.api.onOffline = c.onOffline
	c.up = newUploader(q, c.api.send, c.api.reaches, cfg.Logger, func(u Upload, err error) {
		c.engine.publish(ErrorEvent{UID: u.UID, Err: err, At: time.Now()})
	}, cfg.RetryMin, cfg.RetryMax)
	c.bgCtx, c.bgCancel = context.WithCancel(context.Background())
	return c, nil
}

// EngineEvents returns the global BLE engine state stream: ScanStarted,
// ScanResultEvent (the devices found so far), ScanStopped, Connected,
// Disconnected and ErrorEvent. Each call gets its own channel, closed by
// Close; a reader that falls behind misses events rather than blocking.
func (c *Client) EngineEvents() <-chan EngineEvent { return c.engine.subscribe() }

// Scan looks for mounts for timeout and returns what it found. Results also
// arrive on the engine stream as ScanResultEvents carrying the device list.
func (c *Client) Scan(ctx context.Context, timeout time.Duration) ([]protocol.BLEDevice, error) {
	if err := c.open(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c.engine.publish(ScanStarted{At: time.Now()})
	var mu sync.Mutex
	found := map[string]protocol.BLEDevice{}
	order := []string{}
	list := func() []protocol.BLEDevice {
		out := make([]protocol.BLEDevice, len(order))
		for i, uid := range order {
			out[i] = found[uid]
		}
		return out
	}
	err := c.scan(ctx, func(d protocol.BLEDevice) {
		mu.Lock()
		_, known := found[d.MountUID]
		found[d.MountUID] = d
		if !known {
			order = append(order, d.MountUID)
		}
		devices := list()
		mu.Unlock()
		if !known {
			c.engine.publish(ScanResultEvent{Devices: devices, At: time.Now()})
		}
	})
	mu.Lock()
	devices := list()
	mu.Unlock()
	c.engine.publish(ScanStopped{Devices: devices, At: time.Now()})
	if err != nil {
		c.engine.publish(ErrorEvent{Err: err, At: time.Now()})
		return devices, err
	}
	return devices, nil
}

// scan runs the radio's scan, remembering every mount heard for Connect;
// the scan's normal end (its context's deadline or cancellation) is no error.
func (c *Client) scan(ctx context.Context, each func(protocol.BLEDevice)) error {
	err := c.cfg.Radio.Scan(ctx, func(d protocol.BLEDevice) {
		c.mu.Lock()
		c.seen[d.MountUID] = d
		c.mu.Unlock()
		each(d)
	})
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// Connect opens a connection to the mount uid, seen in an earlier scan (or
// found by a short scan now). Its states arrive on DeviceStates(uid).
func (c *Client) Connect(ctx context.Context, uid string) (protocol.BLEInfo, error) {
	if err := c.open(); err != nil {
		return protocol.BLEInfo{}, err
	}
	c.mu.Lock()
	d, ok := c.devices[uid]
	adv, seen := c.seen[uid]
	c.mu.Unlock()
	if ok {
		return d.info, nil
	}
	var err error
	if !seen {
		if adv, err = c.find(ctx, uid, 3*time.Second); err != nil {
			return protocol.BLEInfo{}, err
		}
	}
	link, err := c.cfg.Radio.Connect(ctx, adv.Address)
	if err != nil {
		c.engine.publish(ErrorEvent{UID: uid, Err: err, At: time.Now()})
		return protocol.BLEInfo{}, err
	}
	raw, err := link.ReadInfo(ctx)
	var info protocol.BLEInfo
	if err == nil {
		err = json.Unmarshal(raw, &info)
	}
	if err == nil && info.UID != uid {
		err = fmt.Errorf("sdk: device at %s is mount %q, not %q", adv.Address, info.UID, uid)
	}
	if err != nil {
		_ = link.Close()
		c.engine.publish(ErrorEvent{UID: uid, Err: err, At: time.Now()})
		return protocol.BLEInfo{}, err
	}
	var nd *device
	c.mu.Lock() // onClose reads nd under c.mu: it waits for the assignment
	nd = newDevice(uid, info, link, func() {
		c.mu.Lock()
		if c.devices[uid] == nd {
			delete(c.devices, uid)
		}
		c.mu.Unlock()
		c.engine.publish(Disconnected{UID: uid, At: time.Now()})
	})
	d = nd
	c.devices[uid] = d
	c.mu.Unlock()
	c.engine.publish(Connected{UID: uid, Info: info, At: time.Now()})
	c.prepare(ctx, d)
	return info, nil
}

// DeviceStates returns the device state stream of a mount: its states and
// command results, until the mount disconnects or the client closes. It
// starts with the latest states the mount reported. Each call gets its own
// channel; a reader that falls behind misses events.
func (c *Client) DeviceStates(uid string) (<-chan DeviceEvent, error) {
	c.mu.Lock()
	d, ok := c.devices[uid]
	c.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotConnected, uid)
	}
	return d.subscribe(), nil
}

// Disconnect closes the connection to a mount.
func (c *Client) Disconnect(uid string) error {
	c.mu.Lock()
	d, ok := c.devices[uid]
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotConnected, uid)
	}
	return d.close()
}

// Close disconnects every mount and ends the streams.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	devices := make([]*device, 0, len(c.devices))
	for _, d := range c.devices {
		devices = append(devices, d)
	}
	c.mu.Unlock()
	for _, d := range devices {
		_ = d.close()
	}
	c.bgCancel()
	c.bg.Wait()
	err := c.up.close()
	c.engine.close()
	return err
}

func (c *Client) open() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

func (c *Client) connected(uid string) (*device, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	d, ok := c.devices[uid]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotConnected, uid)
	}
	return d, nil
}

// find scans until it hears uid, for at most timeout.
func (c *Client) find(ctx context.Context, uid string, timeout time.Duration) (protocol.BLEDevice, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var found protocol.BLEDevice
	var once sync.Once
	err := c.scan(ctx, func(d protocol.BLEDevice) {
		if d.MountUID == uid {
			once.Do(func() { found = d; cancel() })
		}
	})
	if found.MountUID == uid {
		return found, nil
	}
	if err != nil {
		return protocol.BLEDevice{}, err
	}
	return protocol.BLEDevice{}, fmt.Errorf("%w: %s", ErrNotFound, uid)
}
