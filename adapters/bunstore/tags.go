package bunstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
)

var _ core.TagStore = (*Store)(nil)

type tagRow struct {
	bun.BaseModel `bun:"table:nfc_tags"`
	AccountID     string `bun:"account_id,pk"`
	UID           string `bun:"uid,pk"`
	Name          string `bun:"name"`
	Color         string `bun:"color"`
	IconName      string `bun:"icon_name"`
	CreatedAt     int64  `bun:"created_at"`
	UpdatedAt     int64  `bun:"updated_at"`
}

type tagLinkRow struct {
	bun.BaseModel `bun:"table:nfc_tag_mounts"`
	AccountID     string `bun:"account_id"`
	TagUID        string `bun:"tag_uid,pk"`
	MountUID      string `bun:"mount_uid,pk"`
	LinkedAt      int64  `bun:"linked_at"`
}

func (r tagRow) toTag(mounts []string) core.NfcTag {
	if mounts == nil {
		mounts = []string{}
	}
	return core.NfcTag{UID: r.UID, AccountID: r.AccountID, Name: r.Name, Color: r.Color, IconName: r.IconName,
		MountUIDs: mounts, CreatedAt: fromMillis(r.CreatedAt), UpdatedAt: fromMillis(r.UpdatedAt)}
}

// ListTags implements core.TagStore: one query for the page, one for its links.
func (s *Store) ListTags(ctx context.Context, accountID string, mountUIDs []string, p core.Page) ([]core.NfcTag, int, error) {
	var (
		rows  []tagRow
		total int
		links map[string][]string
	)
	err := s.read(ctx, func(db *bun.DB) (err error) {
		rows = nil
		q := db.NewSelect().Model(&rows).Where("account_id = ?", accountID)
		if mountUIDs != nil {
			q = q.Where("uid IN (SELECT tag_uid FROM nfc_tag_mounts WHERE account_id = ? AND mount_uid IN (?))", accountID, bun.In(mountUIDs))
		}
		if total, err = q.Order("uid").Limit(p.PageSize).Offset(p.Offset()).ScanAndCount(ctx); err != nil {
			return err
		}
		links, err = s.tagLinks(ctx, db, accountID, rows)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([]core.NfcTag, len(rows))
	for i, r := range rows {
		out[i] = r.toTag(links[r.UID])
	}
	return out, total, nil
}

func (s *Store) tagLinks(ctx context.Context, db bun.IDB, accountID string, rows []tagRow) (map[string][]string, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	uids := make([]string, len(rows))
	for i, r := range rows {
		uids[i] = r.UID
	}
	var links []tagLinkRow
	if err := db.NewSelect().Model(&links).Where("account_id = ? AND tag_uid IN (?)", accountID, bun.In(uids)).
		Order("tag_uid", "mount_uid").Scan(ctx); err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, l := range links {
		out[l.TagUID] = append(out[l.TagUID], l.MountUID)
	}
	return out, nil
}

// SyncTags implements core.TagStore in one transaction.
func (s *Store) SyncTags(ctx context.Context, accountID, mountUID string, tagUIDs []string, now time.Time, e *core.Event) (added, removed int, err error) {
	err = s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		added, removed = 0, 0
		var m mountRow
		if err := tx.NewSelect().Model(&m).Where("uid = ?", mountUID).Scan(ctx); err != nil {
			return translate(err, core.CodeMountNotFound, fmt.Sprintf("mount %q", mountUID))
		}
		if m.OwnerID.String != accountID || m.State == string(core.StateInactive) {
			return core.Errorf(core.CodeMountNotFound, "mount %q not found", mountUID)
		}
		if m.State != string(core.StateAssociated) {
			return core.Errorf(core.CodeMountNotAssociated, "mount %q is not associated", mountUID)
		}
		if len(tagUIDs) > 0 {
			rows := make([]tagRow, len(tagUIDs))
			for i, uid := range tagUIDs {
				rows[i] = tagRow{AccountID: accountID, UID: uid, CreatedAt: millis(now), UpdatedAt: millis(now)}
			}
			if _, err := tx.NewInsert().Model(&rows).On("CONFLICT (account_id, uid) DO NOTHING").Exec(ctx); err != nil {
				return err
			}
		}
		del := tx.NewDelete().Model((*tagLinkRow)(nil)).Where("mount_uid = ?", mountUID)
		if len(tagUIDs) > 0 {
			del = del.Where("tag_uid NOT IN (?)", bun.In(tagUIDs))
		}
		res, err := del.Exec(ctx)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		removed = int(n)
		if len(tagUIDs) > 0 {
			links := make([]tagLinkRow, len(tagUIDs))
			for i, uid := range tagUIDs {
				links[i] = tagLinkRow{AccountID: accountID, TagUID: uid, MountUID: mountUID, LinkedAt: millis(now)}
			}
			res, err := tx.NewInsert().Model(&links).On("CONFLICT (mount_uid, tag_uid) DO NOTHING").Exec(ctx)
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			added = int(n)
		}
		if err := s.appendEvent(ctx, tx, e, &m); err != nil {
			return err
		}
		return s.recordAudit(ctx, tx)
	})
	return added, removed, err
}

// UpdateTag implements core.TagStore.
func (s *Store) UpdateTag(ctx context.Context, accountID, uid string, u core.NfcTagUpdate, now time.Time) (core.NfcTag, error) {
	var row tagRow
	err := s.writeAudited(ctx, func(ctx context.Context, db bun.IDB) error {
		return db.NewRaw(`UPDATE nfc_tags SET name = COALESCE(?, name), color = COALESCE(?, color), icon_name = COALESCE(?, icon_name),
				updated_at = CASE WHEN ? THEN ? ELSE updated_at END
			WHERE account_id = ? AND uid = ? RETURNING *`,
			u.Name, upperPtr(u.Color), u.IconName, u.Name != nil || u.Color != nil || u.IconName != nil, millis(now), accountID, uid).Scan(ctx, &row)
	})
	if err != nil {
		return core.NfcTag{}, translate(err, core.CodeNfcTagNotFound, "NFC tag")
	}
	links, err := s.tagLinks(ctx, s.db, accountID, []tagRow{row})
	if err != nil {
		return core.NfcTag{}, err
	}
	return row.toTag(links[row.UID]), nil
}

func upperPtr(s *string) *string {
	if s == nil {
		return nil
	}
	u := strings.ToUpper(*s)
	return &u
}

// MountTagUIDs implements core.TagStore.
func (s *Store) MountTagUIDs(ctx context.Context, accountID, mountUID string) ([]string, error) {
	uids := []string{}
	err := s.db.NewSelect().Model((*tagLinkRow)(nil)).Column("tag_uid").Where("account_id = ? AND mount_uid = ?", accountID, mountUID).
		Order("tag_uid").Scan(ctx, &uids)
	return uids, err
}

// TagsOfMounts implements core.TagStore with one join.
func (s *Store) TagsOfMounts(ctx context.Context, accountID string, mountUIDs []string) (map[string][]core.NfcTag, error) {
	var rows []struct {
		tagRow
		MountUID string `bun:"mount_uid"`
	}
	err := s.db.NewRaw(`SELECT t.*, l.mount_uid FROM nfc_tag_mounts l
		JOIN nfc_tags t ON t.account_id = l.account_id AND t.uid = l.tag_uid
		WHERE l.account_id = ? AND l.mount_uid IN (?) ORDER BY l.mount_uid, t.uid`, accountID, bun.In(mountUIDs)).Scan(ctx, &rows)
	if err != nil {
		return nil, err
	}
	unique := map[string]tagRow{}
	for _, r := range rows {
		unique[r.UID] = r.tagRow
	}
	tags := make([]tagRow, 0, len(unique))
	for _, t := range unique {
		tags = append(tags, t)
	}
	links, err := s.tagLinks(ctx, s.db, accountID, tags)
	if err != nil {
		return nil, err
	}
	out := map[string][]core.NfcTag{}
	for _, r := range rows {
		out[r.MountUID] = append(out[r.MountUID], r.tagRow.toTag(links[r.UID]))
	}
	return out, nil
}
