package e2e

import (
	"github.com/mountd/mountd/client"
)

// mountView is a mount as the API shows it.
type mountView = client.Mount

type commandView struct {
	Code        string         `json:"code"`
	Data        map[string]any `json:"data"`
	GeneratedAt string         `json:"generatedAt"`
	Payload     string         `json:"payload"`
	SignedToken *string        `json:"signedToken"`
	IssuedBy    string         `json:"issuedBy"`
}

type historyView struct {
	States []struct {
		Code       string `json:"code"`
		Value      string `json:"value"`
		OccurredAt string `json:"occurredAt"`
		ReceivedAt string `json:"receivedAt"`
	} `json:"states"`
	Pagination struct {
		CurrentPage int `json:"currentPage"`
		PageSize    int `json:"pageSize"`
		TotalItems  int `json:"totalItems"`
		TotalPages  int `json:"totalPages"`
	} `json:"pagination"`
}

// lifecycleView is a Command with its lifecycle fields.
type lifecycleView struct {
	ID       string  `json:"id"`
	Code     string  `json:"code"`
	Payload  string  `json:"payload"`
	Status   string  `json:"status"`
	StatusAt *string `json:"statusAt"`
	Reason   *string `json:"reason"`
	Verified bool    `json:"verified"`
	IssuedBy *string `json:"issuedBy"`
}

type tagView struct {
	UID       string   `json:"uid"`
	Name      string   `json:"name"`
	Color     string   `json:"color"`
	IconName  string   `json:"iconName"`
	MountUIDs []string `json:"mountUids"`
	CreatedAt string   `json:"createdAt"`
	UpdatedAt string   `json:"updatedAt"`
}

type tagList struct {
	Tags       []tagView      `json:"tags"`
	Pagination map[string]int `json:"pagination"`
}

const (
	mountsHeader = "uid,name,serialNumber,macAddress,firmwareRevision,softwareRevision,modelNumber,associationState," +
		"mountLocked,helmetMounted,batteryLevel,cpuTemperature,associatedAt,devicePublicKey,lastSeenAt,presence,offline"
	statesHeader = "uid,code,value,occurredAt,receivedAt,verified"
)

type (
	alarmRuleView = client.AlarmRule
	alarmView     = client.Alarm
)

type eventView struct {
	ID         string    `json:"id"`
	Type       string    `json:"type"`
	UID        string    `json:"uid"`
	OccurredAt string    `json:"occurredAt"`
	Mount      mountView `json:"mount"`
	States     []struct {
		Code  string `json:"code"`
		Value string `json:"value"`
	} `json:"states"`
}

type eventPageView struct {
	Events []eventView `json:"events"`
	Next   string      `json:"next"`
}

// auditView is an entry as GET /api/v1/audit, GraphQL and mountd audit
// --json show it.
type auditView struct {
	ID    string `json:"id"`
	At    string `json:"at"`
	Actor struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"actor"`
	Action        string         `json:"action"`
	Target        string         `json:"target"`
	SourceAddress string         `json:"sourceAddress"`
	Details       map[string]any `json:"details"`
}

type auditPageView struct {
	Entries []auditView `json:"entries"`
	Next    string      `json:"next"`
}

type versionView struct {
	SoftwareRevision string `json:"softwareRevision"`
	ModelNumber      string `json:"modelNumber"`
	AvailableSince   string `json:"availableSince"`
	Deprecated       bool   `json:"deprecated"`
	Mandatory        bool   `json:"mandatory"`
	SHA256           string `json:"sha256"`
	Size             int64  `json:"size"`
}

type jobCountsView struct {
	Pending     int `json:"pending"`
	Issued      int `json:"issued"`
	Executed    int `json:"executed"`
	Refused     int `json:"refused"`
	Unconfirmed int `json:"unconfirmed"`
}

type jobView struct {
	ID          string            `json:"id"`
	Code        string            `json:"code"`
	Params      map[string]string `json:"params"`
	Filter      string            `json:"filter"`
	Description string            `json:"description"`
	State       string            `json:"state"`
	CreatedAt   string            `json:"createdAt"`
	ExpiresAt   string            `json:"expiresAt"`
	Targets     int               `json:"targets"`
	Counts      jobCountsView     `json:"counts"`
}

// pendingView is a pending command: a Command with its job.
type pendingView struct {
	ID          string  `json:"id"`
	Code        string  `json:"code"`
	Payload     string  `json:"payload"`
	SignedToken *string `json:"signedToken"`
	Status      string  `json:"status"`
	JobID       string  `json:"jobId"`
	IssuedBy    *string `json:"issuedBy"`
}

type rolloutCountsView struct {
	Pending    int `json:"pending"`
	Eligible   int `json:"eligible"`
	Installing int `json:"installing"`
	Healthy    int `json:"healthy"`
	Failed     int `json:"failed"`
}

type rolloutView struct {
	ID               string            `json:"id"`
	ModelNumber      string            `json:"modelNumber"`
	SoftwareRevision string            `json:"softwareRevision"`
	Filter           string            `json:"filter"`
	Phases           []int             `json:"phases"`
	FailureThreshold int               `json:"failureThreshold"`
	MinSample        int               `json:"minSample"`
	HealthWindow     string            `json:"healthWindow"`
	RequireIdle      bool              `json:"requireIdle"`
	State            string            `json:"state"`
	PausedReason     *string           `json:"pausedReason"`
	OpenPhase        int               `json:"openPhase"`
	Targets          int               `json:"targets"`
	Counts           rolloutCountsView `json:"counts"`
	CreatedAt        string            `json:"createdAt"`
	EndedAt          *string           `json:"endedAt"`
}

type (
	webhookView  = client.Webhook
	deliveryView = client.Delivery
)

const alarmFields = `id ruleId ruleName uid severity state raisedAt clearedAt acknowledgedAt acknowledgedBy values`

const ruleFields = `id name severity conditions { code op value presence } forSeconds mountUids enabled createdAt updatedAt`

type gqlAlarm struct {
	ID             string            `json:"id"`
	RuleID         string            `json:"ruleId"`
	RuleName       string            `json:"ruleName"`
	UID            string            `json:"uid"`
	Severity       string            `json:"severity"`
	State          string            `json:"state"`
	RaisedAt       string            `json:"raisedAt"`
	ClearedAt      *string           `json:"clearedAt"`
	AcknowledgedAt *string           `json:"acknowledgedAt"`
	AcknowledgedBy *string           `json:"acknowledgedBy"`
	Values         map[string]string `json:"values"`
}

type gqlCondition struct {
	Code     *string `json:"code"`
	Op       *string `json:"op"`
	Value    *string `json:"value"`
	Presence *string `json:"presence"`
}

type gqlRule struct {
	ID         string         `json:"id"`
	Name       string         `json:"name"`
	Severity   string         `json:"severity"`
	Conditions []gqlCondition `json:"conditions"`
	ForSeconds int            `json:"forSeconds"`
	MountUIDs  []string       `json:"mountUids"`
	Enabled    bool           `json:"enabled"`
	CreatedAt  string         `json:"createdAt"`
	UpdatedAt  string         `json:"updatedAt"`
}

const jobFields = `id code params filter description state createdAt expiresAt targets counts { pending issued executed refused unconfirmed }`

type gqlJob struct {
	ID          string            `json:"id"`
	Code        string            `json:"code"`
	Params      map[string]string `json:"params"`
	Filter      *string           `json:"filter"`
	Description string            `json:"description"`
	State       string            `json:"state"`
	CreatedAt   string            `json:"createdAt"`
	ExpiresAt   string            `json:"expiresAt"`
	Targets     int               `json:"targets"`
	Counts      struct {
		Pending, Issued, Executed, Refused, Unconfirmed int
	} `json:"counts"`
}

const gqlRolloutFields = `id modelNumber softwareRevision filter phases failureThreshold minSample healthWindow requireIdle state pausedReason openPhase targets
	counts { pending eligible installing healthy failed } createdAt endedAt`

type gqlRollout struct {
	ID               string  `json:"id"`
	ModelNumber      string  `json:"modelNumber"`
	SoftwareRevision string  `json:"softwareRevision"`
	Filter           *string `json:"filter"`
	Phases           []int   `json:"phases"`
	FailureThreshold int     `json:"failureThreshold"`
	MinSample        int     `json:"minSample"`
	HealthWindow     string  `json:"healthWindow"`
	RequireIdle      bool    `json:"requireIdle"`
	State            string  `json:"state"`
	PausedReason     *string `json:"pausedReason"`
	OpenPhase        int     `json:"openPhase"`
	Targets          int     `json:"targets"`
	Counts           struct {
		Pending, Eligible, Installing, Healthy, Failed int
	} `json:"counts"`
	CreatedAt string  `json:"createdAt"`
	EndedAt   *string `json:"endedAt"`
}

type gqlRolloutTarget struct {
	UID             string  `json:"uid"`
	State           string  `json:"state"`
	Phase           int     `json:"phase"`
	CommandID       *string `json:"commandId"`
	InstallingSince *string `json:"installingSince"`
	Reason          *string `json:"reason"`
}
