package protocol

import "fmt"

// ErrorCode is a machine-readable error code of the API (docs/api.md): the
// "code" of a problem document and a GraphQL error's extensions.code. The
// server raises them (core.Code) and clients branch on them.
type ErrorCode string

// The API's error codes.
const (
	CodeValidation            ErrorCode = "VALIDATION_FAILED"
	CodeUnauthenticated       ErrorCode = "UNAUTHENTICATED"
	CodeInsufficientScope     ErrorCode = "INSUFFICIENT_SCOPE"
	CodeForbidden             ErrorCode = "FORBIDDEN"
	CodeNotFound              ErrorCode = "NOT_FOUND"
	CodeMountNotFound         ErrorCode = "MOUNT_NOT_FOUND"
	CodeNfcTagNotFound        ErrorCode = "NFC_TAG_NOT_FOUND"
	CodeFirmwareNotFound      ErrorCode = "FIRMWARE_NOT_FOUND"
	CodeMountAlreadyOwned     ErrorCode = "MOUNT_ALREADY_OWNED"
	CodeAssociationNotPending ErrorCode = "ASSOCIATION_NOT_PENDING"
	CodeMountNotAssociated    ErrorCode = "MOUNT_NOT_ASSOCIATED"
	CodeAssociationExpired    ErrorCode = "ASSOCIATION_EXPIRED"
	CodeConflict              ErrorCode = "CONFLICT"
	CodePayloadTooLarge       ErrorCode = "PAYLOAD_TOO_LARGE"
	CodeRateLimited           ErrorCode = "RATE_LIMITED"
	CodeRequestTimeout        ErrorCode = "REQUEST_TIMEOUT"
	CodeMethodNotAllowed      ErrorCode = "METHOD_NOT_ALLOWED"
	CodeUnsupportedMedia      ErrorCode = "UNSUPPORTED_MEDIA_TYPE"
	CodeInternal              ErrorCode = "INTERNAL"
	CodeUnavailable           ErrorCode = "UNAVAILABLE"
	CodeCursorExpired         ErrorCode = "CURSOR_EXPIRED"
	CodeWebhookNotFound       ErrorCode = "WEBHOOK_NOT_FOUND"
	CodeCommandNotFound       ErrorCode = "COMMAND_NOT_FOUND"
	CodeSignatureRequired     ErrorCode = "SIGNATURE_REQUIRED"
	CodeInvalidSignature      ErrorCode = "INVALID_SIGNATURE"
	CodeAlarmRuleNotFound     ErrorCode = "ALARM_RULE_NOT_FOUND"
	CodeAlarmNotFound         ErrorCode = "ALARM_NOT_FOUND"
	CodeJobNotFound           ErrorCode = "JOB_NOT_FOUND"
	CodeRolloutNotFound       ErrorCode = "ROLLOUT_NOT_FOUND"
	CodeGrantNotFound         ErrorCode = "GRANT_NOT_FOUND"
	CodeDeviceKeyRequired     ErrorCode = "DEVICE_KEY_REQUIRED"
)

// AudienceItem is the mandatory scope item naming the service project of a
// deployment (docs/api.md, "Identity"): the server requires it in a token,
// clients ask for it.
func AudienceItem(idpName, projectID string) string {
	return fmt.Sprintf("urn:%s:iam:org:project:id:%s:aud", idpName, projectID)
}

// JobSends says whether a job may send code: not ASSOCIATE_OWNER (an
// association is one mount's) nor INSTALL_FIRMWARE (rollouts send it).
func JobSends(code CommandCode) bool {
	return code != CmdAssociateOwner && code != CmdInstallFirmware
}

// JobCommandCodes lists the codes a job sends, in CommandCodes' order;
// CommandParamRules tells each one's parameters (mountctl's help prints both).
func JobCommandCodes() []CommandCode {
	var codes []CommandCode
	for _, c := range CommandCodes {
		if JobSends(c) {
			codes = append(codes, c)
		}
	}
	return codes
}

// RolloutPhaseSizes is how many of n targets each phase of a rollout holds:
// phase i takes the ranks below ceil(phases[i]% of n), cumulatively; the
// last phase takes whatever is left. The server assigns targets by it and
// mountctl shows a rollout's phases with it.
func RolloutPhaseSizes(phases []int, n int) []int {
	sizes := make([]int, len(phases))
	below := 0
	for i, p := range phases {
		upTo := max(min((p*n+99)/100, n), below)
		if i == len(phases)-1 {
			upTo = n
		}
		sizes[i] = upTo - below
		below = upTo
	}
	return sizes
}
