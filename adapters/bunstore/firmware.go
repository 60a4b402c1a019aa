package bunstore

import (
	"context"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
)

var _ core.FirmwareStore = (*Store)(nil)

type firmwareRow struct {
	bun.BaseModel    `bun:"table:firmware_versions"`
	ModelNumber      string `bun:"model_number,pk"`
	SoftwareRevision string `bun:"software_revision,pk"`
	AvailableSince   int64  `bun:"available_since"`
	Deprecated       bool   `bun:"deprecated"`
	Mandatory        bool   `bun:"mandatory"`
	SHA256           string `bun:"sha256"`
	Size             int64  `bun:"size"`
	BlobKey          string `bun:"blob_key"`
	CreatedAt        int64  `bun:"created_at"`
}

func (r firmwareRow) toVersion() core.FirmwareVersion {
	return core.FirmwareVersion{ModelNumber: r.ModelNumber, SoftwareRevision: r.SoftwareRevision,
		AvailableSince: fromMillis(r.AvailableSince), Deprecated: r.Deprecated, Mandatory: r.Mandatory,
		SHA256: r.SHA256, Size: r.Size, BlobKey: r.BlobKey}
}

// InsertFirmware implements core.FirmwareStore.
func (s *Store) InsertFirmware(ctx context.Context, v core.FirmwareVersion) error {
	row := &firmwareRow{ModelNumber: v.ModelNumber, SoftwareRevision: v.SoftwareRevision, AvailableSince: millis(v.AvailableSince),
		Deprecated: v.Deprecated, Mandatory: v.Mandatory, SHA256: v.SHA256, Size: v.Size, BlobKey: v.BlobKey, CreatedAt: millis(time.Now())}
	err := s.writeAudited(ctx, func(ctx context.Context, db bun.IDB) error {
		_, err := db.NewInsert().Model(row).Exec(ctx)
		return err
	})
	return translate(err, core.CodeFirmwareNotFound, "firmware version")
}

// ListFirmware implements core.FirmwareStore.
func (s *Store) ListFirmware(ctx context.Context, model *string, now time.Time, p core.Page) ([]core.FirmwareVersion, int, error) {
	var rows []firmwareRow
	total, err := s.readPage(ctx, func(db *bun.DB) *bun.SelectQuery {
		rows = nil
		q := db.NewSelect().Model(&rows).Where("available_since <= ?", millis(now))
		if model != nil {
			q = q.Where("model_number = ?", *model)
		}
		return q.OrderExpr("available_since DESC, model_number, software_revision DESC").
			Limit(p.PageSize).Offset(p.Offset())
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([]core.FirmwareVersion, len(rows))
	for i, r := range rows {
		out[i] = r.toVersion()
	}
	return out, total, nil
}

// ModelFirmware implements core.FirmwareStore.
func (s *Store) ModelFirmware(ctx context.Context, model string, now time.Time) ([]core.FirmwareVersion, error) {
	var rows []firmwareRow
	if err := s.db.NewSelect().Model(&rows).Where("model_number = ? AND available_since <= ?", model, millis(now)).Scan(ctx); err != nil {
		return nil, err
	}
	out := make([]core.FirmwareVersion, len(rows))
	for i, r := range rows {
		out[i] = r.toVersion()
	}
	return out, nil
}

// DeprecateFirmware implements core.FirmwareStore.
func (s *Store) DeprecateFirmware(ctx context.Context, model, revision string) (core.FirmwareVersion, error) {
	var row firmwareRow
	err := s.writeAudited(ctx, func(ctx context.Context, db bun.IDB) error {
		return db.NewRaw(`UPDATE firmware_versions SET deprecated = TRUE WHERE model_number = ? AND software_revision = ? RETURNING *`,
			model, revision).Scan(ctx, &row)
	})
	if err != nil {
		return core.FirmwareVersion{}, translate(err, core.CodeFirmwareNotFound, "firmware version")
	}
	return row.toVersion(), nil
}
