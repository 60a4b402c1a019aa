package bunstore

import (
	"context"
	"slices"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
)

var _ core.AccountStore = (*Store)(nil)

type accountRow struct {
	bun.BaseModel `bun:"table:accounts"`
	ID            string `bun:"id,pk"`
	Name          string `bun:"name"`
	CreatedAt     int64  `bun:"created_at"`
}

type apiClientRow struct {
	bun.BaseModel `bun:"table:api_clients"`
	ClientID      string `bun:"client_id,pk"`
	AccountID     string `bun:"account_id"`
	Name          string `bun:"name"`
	SecretHash    string `bun:"secret_hash"`
	CreatedAt     int64  `bun:"created_at"`
}

// CreateAccount stores an account and its first client atomically.
func (s *Store) CreateAccount(ctx context.Context, a core.Account, c core.APIClient) error {
	return s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&accountRow{ID: a.ID, Name: a.Name, CreatedAt: millis(a.CreatedAt)}).Exec(ctx); err != nil {
			return translate(err, core.CodeNotFound, "account")
		}
		row := &apiClientRow{ClientID: c.ClientID, AccountID: a.ID, Name: c.Name, SecretHash: c.SecretHash, CreatedAt: millis(c.CreatedAt)}
		if _, err := tx.NewInsert().Model(row).Exec(ctx); err != nil {
			return translate(err, core.CodeNotFound, "client")
		}
		return s.recordAudit(ctx, tx)
	})
}

// AddAPIClient stores a further client for an existing account.
func (s *Store) AddAPIClient(ctx context.Context, c core.APIClient) error {
	row := &apiClientRow{ClientID: c.ClientID, AccountID: c.AccountID, Name: c.Name, SecretHash: c.SecretHash, CreatedAt: millis(c.CreatedAt)}
	err := s.write(ctx, func() error {
		_, err := s.db.NewInsert().Model(row).Exec(ctx)
		return err
	})
	return translate(err, core.CodeNotFound, "client")
}

// EnsureAccount stores an account unless its id is taken.
func (s *Store) EnsureAccount(ctx context.Context, a core.Account) error {
	row := &accountRow{ID: a.ID, Name: a.Name, CreatedAt: millis(a.CreatedAt)}
	err := s.write(ctx, func() error {
		_, err := s.db.NewInsert().Model(row).On("CONFLICT (id) DO NOTHING").Exec(ctx)
		return err
	})
	return translate(err, core.CodeNotFound, "account")
}

// Accounts lists the accounts with their client counts, oldest first.
func (s *Store) Accounts(ctx context.Context) ([]core.AccountSummary, error) {
	var rows []struct {
		accountRow `bun:",extend"`
		Clients    int `bun:"clients"`
	}
	err := s.db.NewSelect().Model((*accountRow)(nil)).Column("id", "name", "created_at").
		ColumnExpr("(SELECT count(*) FROM api_clients c WHERE c.account_id = account_row.id) AS clients").
		Order("created_at", "id").Scan(ctx, &rows)
	if err != nil {
		return nil, translate(err, core.CodeNotFound, "account")
	}
	out := make([]core.AccountSummary, len(rows))
	for i, r := range rows {
		out[i] = core.AccountSummary{Account: core.Account{ID: r.ID, Name: r.Name, CreatedAt: fromMillis(r.CreatedAt)}, Clients: r.Clients}
	}
	return out, nil
}

// ReplaceClientSecrets sets a new secret hash on the account's clients.
func (s *Store) ReplaceClientSecrets(ctx context.Context, accountID, secretHash string) ([]string, error) {
	return s.updateClients(ctx, accountID, "secret_hash = ?", secretHash)
}

// RehashClientSecret implements core.AccountStore: one conditional UPDATE,
// so a rotation committed before it leaves it nothing to match.
func (s *Store) RehashClientSecret(ctx context.Context, clientID, oldHash, newHash string) (bool, error) {
	var n int64
	err := s.write(ctx, func() error {
		res, err := s.db.NewUpdate().Model((*apiClientRow)(nil)).Set("secret_hash = ?", newHash).
			Where("client_id = ?", clientID).Where("secret_hash = ?", oldHash).Exec(ctx)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, translate(err, core.CodeNotFound, "client")
	}
	return n == 1, nil
}

// RenameClients implements core.AccountStore.
func (s *Store) RenameClients(ctx context.Context, accountID, name string) ([]string, error) {
	return s.updateClients(ctx, accountID, "name = ?", name)
}

// updateClients sets one column of the account's clients, audited;
// CodeNotFound when the account has none.
func (s *Store) updateClients(ctx context.Context, accountID, set string, value any) ([]string, error) {
	var ids []string
	err := s.writeAudited(ctx, func(ctx context.Context, db bun.IDB) error {
		ids = nil
		if err := db.NewUpdate().Model((*apiClientRow)(nil)).Set(set, value).
			Where("account_id = ?", accountID).Returning("client_id").Scan(ctx, &ids); err != nil {
			return translate(err, core.CodeNotFound, "client")
		}
		if len(ids) == 0 {
			// Inside the transaction: an account without clients has
			// nothing rotated, and no entry says otherwise.
			return core.Errorf(core.CodeNotFound, "the account has no client credentials")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}

// Account returns an account by id (CodeNotFound when absent).
func (s *Store) Account(ctx context.Context, id string) (core.Account, error) {
	var row accountRow
	if err := s.db.NewSelect().Model(&row).Where("id = ?", id).Scan(ctx); err != nil {
		return core.Account{}, translate(err, core.CodeNotFound, "account")
	}
	return core.Account{ID: row.ID, Name: row.Name, CreatedAt: fromMillis(row.CreatedAt)}, nil
}

// APIClient returns a client by client id (CodeNotFound when absent).
func (s *Store) APIClient(ctx context.Context, clientID string) (core.APIClient, error) {
	var row apiClientRow
	if err := s.db.NewSelect().Model(&row).Where("client_id = ?", clientID).Scan(ctx); err != nil {
		return core.APIClient{}, translate(err, core.CodeNotFound, "client")
	}
	return core.APIClient{ClientID: row.ClientID, AccountID: row.AccountID, Name: row.Name, SecretHash: row.SecretHash,
		CreatedAt: fromMillis(row.CreatedAt)}, nil
}

// actorNameSQL is the name a change by a is recorded under
// (core.ClientActorName) as an SQL expression and its arguments: for a
// client, its name in api_clients read by the statement that records the
// change, else the name given.
func actorNameSQL(a core.Actor) (string, []any) {
	if a.Type != core.ActorClient {
		return "?", []any{a.Name}
	}
	return "COALESCE((SELECT NULLIF(c.name, '') FROM api_clients c WHERE c.client_id = ?), ?)", []any{a.ID, a.Name}
}
