package bunstore

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/adapters/keyring"
)

var _ keyring.SigningKeyStore = (*Store)(nil)

type signingKeyRow struct {
	bun.BaseModel    `bun:"table:signing_keys"`
	ID               string `bun:"id,pk"`
	Purpose          string `bun:"purpose"`
	Algorithm        string `bun:"algorithm"`
	PublicKey        string `bun:"public_key"`
	SealedPrivateKey string `bun:"sealed_private_key"`
	CreatedAt        int64  `bun:"created_at"`
}

// SigningKey returns the key stored for purpose; found is false when none is.
func (s *Store) SigningKey(ctx context.Context, purpose string) (keyring.StoredKey, bool, error) {
	var rows []signingKeyRow
	if err := s.db.NewSelect().Model(&rows).Where("purpose = ?", purpose).Limit(1).Scan(ctx); err != nil {
		return keyring.StoredKey{}, false, err
	}
	if len(rows) == 0 {
		return keyring.StoredKey{}, false, nil
	}
	r := rows[0]
	return keyring.StoredKey{ID: r.ID, Purpose: r.Purpose, Algorithm: r.Algorithm, PublicKey: r.PublicKey,
		SealedPrivateKey: r.SealedPrivateKey, CreatedAt: fromMillis(r.CreatedAt)}, true, nil
}

// InsertSigningKeyIfAbsent stores k unless a key for its purpose exists, so
// that replicas starting together keep exactly one.
func (s *Store) InsertSigningKeyIfAbsent(ctx context.Context, k keyring.StoredKey) error {
	row := &signingKeyRow{ID: k.ID, Purpose: k.Purpose, Algorithm: k.Algorithm, PublicKey: k.PublicKey,
		SealedPrivateKey: k.SealedPrivateKey, CreatedAt: millis(k.CreatedAt)}
	return s.write(ctx, func() error {
		_, err := s.db.NewInsert().Model(row).On("CONFLICT DO NOTHING").Exec(ctx)
		return err
	})
}
