package core

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/Masterminds/semver/v3"
)

// FirmwareVersion is one published firmware binary for a model.
type FirmwareVersion struct {
	ModelNumber      string
	SoftwareRevision string
	AvailableSince   time.Time
	Deprecated       bool
	Mandatory        bool
	SHA256           string
	Size             int64
	BlobKey          string
}

// Update codes of check-update.
const (
	UpdateUpToDate  = "UP_TO_DATE"
	UpdateAvailable = "UPDATE_AVAILABLE"
	UpdateMandatory = "MANDATORY_UPDATE"
)

// UpdateCheck is the answer of check-update; Version is nil when up to date.
type UpdateCheck struct {
	Code    string
	Version *FirmwareVersion
}

// Download is a temporary link to a firmware binary.
type Download struct {
	Version   FirmwareVersion
	Link      string
	ExpiresAt time.Time
}

// FirmwareStore persists the firmware catalogue.
type FirmwareStore interface {
	// InsertFirmware adds a version; CONFLICT when model and revision exist.
	InsertFirmware(ctx context.Context, v FirmwareVersion) error
	// ListFirmware lists versions visible at now (availableSince <= now),
	// deprecated ones too, newest availableSince first; model filters when set.
	ListFirmware(ctx context.Context, model *string, now time.Time, p Page) ([]FirmwareVersion, int, error)
	// ModelFirmware returns every version of a model visible at now.
	ModelFirmware(ctx context.Context, model string, now time.Time) ([]FirmwareVersion, error)
	// DeprecateFirmware marks a version deprecated; FIRMWARE_NOT_FOUND when absent.
	DeprecateFirmware(ctx context.Context, model, revision string) (FirmwareVersion, error)
}

// BlobStore keeps firmware binaries and hands out temporary links to them.
type BlobStore interface {
	// Put stores r under key, returning its size and hex SHA-256, streaming.
	Put(ctx context.Context, key string, r io.Reader) (size int64, sha256 string, err error)
	// Delete removes key (a failed publish cleans up with it).
	Delete(ctx context.Context, key string) error
	// Link returns a URL that serves key until expires, without a token.
	Link(ctx context.Context, key string, expires time.Time) (string, error)
}

// DownloadTTL is how long a firmware download link lives.
type DownloadTTL time.Duration

// FirmwareService holds the rules of docs/api.md, "Firmware".
type FirmwareService struct {
	store    FirmwareStore
	rollouts RolloutStore
	blobs    BlobStore
	ttl      DownloadTTL
	logger   *slog.Logger
	now      func() time.Time
}

// NewFirmwareService returns a FirmwareService over its ports.
func NewFirmwareService(store FirmwareStore, blobs BlobStore, ttl DownloadTTL, rollouts RolloutStore, logger *slog.Logger) *FirmwareService {
	return &FirmwareService{store: store, rollouts: rollouts, blobs: blobs, ttl: ttl, logger: logger, now: time.Now}
}

// SetClock replaces the service's clock (tests).
func (s *FirmwareService) SetClock(now func() time.Time) { s.now = now }

// Publish is `mountd firmware publish`: the binary is written to the blob
// store first and the catalogue row after it; a failed insert removes the
// blob again, so a failed publish leaves neither row nor orphan file.
func (s *FirmwareService) Publish(ctx context.Context, model, revision string, availableSince *time.Time, mandatory bool, r io.Reader) (FirmwareVersion, error) {
	var v Validation
	if model == "" || len(model) > 64 {
		v.Add("model", "must be 1 to 64 characters")
	}
	ver, err := semver.StrictNewVersion(revision)
	if err != nil {
		v.Add("revision", "must be a semantic version such as 1.4.0")
	}
	if err := v.Err(); err != nil {
		return FirmwareVersion{}, err
	}
	since := s.now().UTC().Truncate(time.Millisecond)
	if availableSince != nil {
		since = availableSince.UTC().Truncate(time.Millisecond)
	}
	key := "firmware/" + model + "/" + ver.String() + "-" + randomHex(6) + ".bin"
	size, sum, err := s.blobs.Put(ctx, key, r)
	if err != nil {
		return FirmwareVersion{}, err
	}
	fw := FirmwareVersion{ModelNumber: model, SoftwareRevision: ver.String(), AvailableSince: since,
		Mandatory: mandatory, SHA256: sum, Size: size, BlobKey: key}
	actx := byOperator(ctx, "", s.now(), AuditFirmwarePublish, firmwareTarget(model, fw.SoftwareRevision),
		map[string]any{"modelNumber": model, "softwareRevision": fw.SoftwareRevision, "availableSince": FormatTime(since),
			"mandatory": mandatory, "sha256": sum, "size": size})
	if err := s.store.InsertFirmware(actx, fw); err != nil {
		if derr := s.blobs.Delete(context.WithoutCancel(ctx), key); derr != nil {
			s.logger.ErrorContext(ctx, "remove blob of failed publish", "key", key, "err", derr)
		}
		if ErrorCode(err) == CodeConflict {
			return FirmwareVersion{}, Errorf(CodeConflict, "firmware %s %s is already published", model, ver.String())
		}
		return FirmwareVersion{}, err
	}
	return fw, nil
}

// Deprecate is `mountd firmware deprecate`. A deprecated version is one
// the operator no longer trusts: every RUNNING rollout of it, in any
// account, is paused (MANUAL, ROLLOUT_PAUSED, audited as rollout.pause by
// the operator in the rollout's account), so no further mount is offered
// it, and cannot be resumed. The pauses follow the deprecation's own
// transaction: should one fail, deprecating again pauses what is left.
// It returns the rollouts it paused.
func (s *FirmwareService) Deprecate(ctx context.Context, model, revision string) (FirmwareVersion, []Rollout, error) {
	if v, err := semver.StrictNewVersion(revision); err == nil {
		revision = v.String()
	}
	actx := byOperator(ctx, "", s.now(), AuditFirmwareDeprecate, firmwareTarget(model, revision), nil)
	fw, err := s.store.DeprecateFirmware(actx, model, revision)
	if err != nil || s.rollouts == nil {
		return fw, nil, err
	}
	running, err := s.rollouts.RunningRolloutsOf(ctx, model, revision)
	if err != nil {
		return FirmwareVersion{}, nil, err
	}
	paused := []Rollout{}
	for _, r := range running {
		now := s.now()
		actx := byOperator(ctx, r.AccountID, now, AuditRolloutPause, AuditTarget("rollout", r.ID),
			map[string]any{"reason": "firmware deprecated"})
		changed, _, err := s.rollouts.ChangeRollout(actx, r.AccountID, r.ID, now, ChangeRolloutState(AuditRolloutPause, now))
		if ErrorCode(err) == CodeConflict {
			continue // paused, cancelled or completed meanwhile
		}
		if err != nil {
			return FirmwareVersion{}, paused, fmt.Errorf("pause rollout %s of the deprecated version: %w", r.ID, err)
		}
		paused = append(paused, changed)
	}
	return fw, paused, nil
}

// firmwareTarget names a version in the audit log.
func firmwareTarget(model, revision string) string {
	return AuditTarget("firmware", model+"@"+revision)
}

// List handles GET /firmware/versions.
func (s *FirmwareService) List(ctx context.Context, p Principal, model *string, page Page) ([]FirmwareVersion, Pagination, error) {
	if err := p.Authorize(ActionReadFirmware); err != nil {
		return nil, Pagination{}, err
	}
	list, total, err := s.store.ListFirmware(ctx, model, s.now().UTC(), page)
	if err != nil {
		return nil, Pagination{}, err
	}
	return list, NewPagination(page, total), nil
}

// parseRevision checks an optional softwareRevision parameter.
func parseRevision(rev *string) (*semver.Version, error) {
	if rev == nil {
		return nil, nil
	}
	v, err := semver.NewVersion(*rev)
	if err != nil {
		var val Validation
		val.Add("softwareRevision", "must be a semantic version such as 1.4.0")
		return nil, val.Err()
	}
	return v, nil
}

func validateModel(model string) error {
	if model == "" {
		var v Validation
		v.Add("modelNumber", "is required")
		return v.Err()
	}
	return nil
}

// opening is what every check-update and download begins with: p may
// read firmware, model is given, rev (when given) is a semantic version;
// it returns the model's visible versions (FIRMWARE_NOT_FOUND when there
// are none) and rev parsed.
func (s *FirmwareService) opening(ctx context.Context, p Principal, model string, rev *string) ([]FirmwareVersion, *semver.Version, error) {
	if err := p.Authorize(ActionReadFirmware); err != nil {
		return nil, nil, err
	}
	if err := validateModel(model); err != nil {
		return nil, nil, err
	}
	current, err := parseRevision(rev)
	if err != nil {
		return nil, nil, err
	}
	all, err := s.store.ModelFirmware(ctx, model, s.now().UTC())
	if err != nil {
		return nil, nil, err
	}
	if len(all) == 0 {
		return nil, nil, Errorf(CodeFirmwareNotFound, "no firmware for model %q", model)
	}
	return all, current, nil
}

// latestOf returns the non-deprecated latest of all by semantic version
// (nil when there is none).
func latestOf(all []FirmwareVersion) (*FirmwareVersion, *semver.Version) {
	var latest *FirmwareVersion
	var latestVer *semver.Version
	for i := range all {
		v, err := semver.NewVersion(all[i].SoftwareRevision)
		if err != nil || all[i].Deprecated {
			continue
		}
		if latestVer == nil || v.GreaterThan(latestVer) {
			latest, latestVer = &all[i], v
		}
	}
	return latest, latestVer
}

// CheckUpdate handles GET /firmware/check-update.
func (s *FirmwareService) CheckUpdate(ctx context.Context, p Principal, model string, rev *string) (UpdateCheck, error) {
	all, current, err := s.opening(ctx, p, model, rev)
	if err != nil {
		return UpdateCheck{}, err
	}
	return verdict(all, current), nil
}

// verdict applies the rules of check-update to the visible versions all
// of a model for a mount on current (nil: unknown).
func verdict(all []FirmwareVersion, current *semver.Version) UpdateCheck {
	latest, latestVer := latestOf(all)
	if latest == nil {
		// Every version is deprecated: nothing to move to.
		return UpdateCheck{Code: UpdateUpToDate}
	}
	if current != nil && !current.LessThan(latestVer) {
		return UpdateCheck{Code: UpdateUpToDate}
	}
	return UpdateCheck{Code: updateCode(all, current, latestVer), Version: latest}
}

// updateCode is MANDATORY_UPDATE when current is deprecated or a mandatory
// version above it, up to target, exists; UPDATE_AVAILABLE otherwise.
func updateCode(all []FirmwareVersion, current, target *semver.Version) string {
	for _, v := range all {
		ver, err := semver.NewVersion(v.SoftwareRevision)
		if err != nil {
			continue
		}
		currentDeprecated := current != nil && v.Deprecated && ver.Equal(current)
		mandatoryAbove := !v.Deprecated && v.Mandatory && (current == nil || ver.GreaterThan(current)) && !ver.GreaterThan(target)
		if currentDeprecated || mandatoryAbove {
			return UpdateMandatory
		}
	}
	return UpdateAvailable
}

// CheckMountUpdate handles GET /firmware/check-update?mountUid=: m is the
// mount, read with the principal's rights. A mount that is an ELIGIBLE or
// INSTALLING target of a RUNNING rollout of its account gets the
// rollout's version whenever rev differs from it, older or newer (a
// rollout may go back to an older revision), and UP_TO_DATE only on it.
// While a RUNNING or PAUSED rollout exists for the model, any other mount
// of the account gets the answer it would get if the catalogue held
// nothing from the rollout's revision up (UP_TO_DATE when that leaves no
// candidate): a PAUSED rollout offers nothing, its own targets included,
// as pending-commands (docs/api.md, "Rollouts"); a canceled or
// completed one gates nothing. A deprecated rollout version is named to
// no target: they get that answer too.
func (s *FirmwareService) CheckMountUpdate(ctx context.Context, p Principal, model string, rev *string, m Mount) (UpdateCheck, error) {
	all, current, err := s.opening(ctx, p, model, rev)
	if err != nil {
		return UpdateCheck{}, err
	}
	if s.rollouts == nil {
		return verdict(all, current), nil
	}
	r, t, ok, err := s.rollouts.RolloutFor(ctx, p.AccountID, model, m.UID)
	if err != nil {
		return UpdateCheck{}, err
	}
	if !ok {
		return verdict(all, current), nil
	}
	target, err := semver.NewVersion(r.SoftwareRevision)
	if err != nil {
		return UpdateCheck{}, err
	}
	offered := r.State == RolloutRunning && t != nil &&
		(t.State == TargetStateEligible || t.State == TargetStateInstalling)
	if offered {
		for i := range all {
			v, err := semver.NewVersion(all[i].SoftwareRevision)
			// A version deprecated since the rollout began is offered no more.
			if err != nil || !v.Equal(target) || all[i].Deprecated {
				continue
			}
			if current != nil && current.Equal(target) {
				return UpdateCheck{Code: UpdateUpToDate}, nil
			}
			return UpdateCheck{Code: updateCode(all, current, target), Version: &all[i]}, nil
		}
	}
	below := make([]FirmwareVersion, 0, len(all))
	for _, fw := range all {
		if v, err := semver.NewVersion(fw.SoftwareRevision); err == nil && v.LessThan(target) {
			below = append(below, fw)
		}
	}
	return verdict(below, current), nil
}

// Download handles GET /firmware/download.
func (s *FirmwareService) Download(ctx context.Context, p Principal, model string, rev *string) (Download, error) {
	all, want, err := s.opening(ctx, p, model, rev)
	if err != nil {
		return Download{}, err
	}
	var chosen *FirmwareVersion
	if want == nil {
		chosen, _ = latestOf(all)
	} else {
		for i := range all {
			if v, err := semver.NewVersion(all[i].SoftwareRevision); err == nil && v.Equal(want) {
				chosen = &all[i]
			}
		}
	}
	if chosen == nil {
		return Download{}, Errorf(CodeFirmwareNotFound, "no such firmware for model %q", model)
	}
	expires := s.now().UTC().Truncate(time.Second).Add(time.Duration(s.ttl))
	link, err := s.blobs.Link(ctx, chosen.BlobKey, expires)
	if err != nil {
		return Download{}, err
	}
	return Download{Version: *chosen, Link: link, ExpiresAt: expires}, nil
}

// OpenedBlob is a firmware file opened behind a signed link, with what HTTP
// caching needs.
type OpenedBlob struct {
	io.ReadSeekCloser
	ModTime time.Time
	ETag    string
}
