package core

import (
	"context"
	"sort"
	"strconv"

	"github.com/Masterminds/semver/v3"
)

// ActionInstallFirmware is asking GET /mounts/{uid}/query for an
// INSTALL_FIRMWARE: owners only (a technician installing by hand);
// restricted tokens get the command through pending-commands, when a
// rollout offers it.
const ActionInstallFirmware Action = "mount.command.install-firmware"

// queryInstallFirmware handles GET /mounts/{uid}/query?code=INSTALL_FIRMWARE&revision=R:
// one fresh signed INSTALL_FIRMWARE for R, which must be published (visible,
// deprecated allowed) for the mount's model; its sha256 and size are the
// catalogue's.
func (s *MountService) queryInstallFirmware(ctx context.Context, p Principal, uid string, params CommandParams) ([]Command, error) {
	// A restricted token is refused before the mount is read.
	if err := p.AuthorizeMount(ActionInstallFirmware, uid); err != nil {
		return nil, err
	}
	m, err := s.owned(ctx, p, ActionInstallFirmware, uid)
	if err != nil {
		return nil, err
	}
	var v Validation
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name != "revision" {
			v.Add(name, "does not belong to %s", CmdInstallFirmware)
		}
	}
	revision, given := params["revision"]
	want, perr := semver.StrictNewVersion(revision)
	switch {
	case !given:
		v.Add("revision", "is required for %s", CmdInstallFirmware)
	case perr != nil:
		v.Add("revision", "must be a semantic version such as 1.4.0")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if m.State != StateAssociated {
		return nil, Errorf(CodeMountNotAssociated, "mount %q is not associated", uid)
	}
	fw, err := s.publishedFirmware(ctx, m.ModelNumber, want)
	if err != nil {
		return nil, err
	}
	cc, norm, err := ValidateCommandQuery(string(CmdInstallFirmware), InstallFirmwareParams(fw))
	if err != nil {
		return nil, err
	}
	cmd, err := s.issue(ctx, p, m, cc, norm, s.clock())
	if err != nil {
		return nil, err
	}
	return []Command{cmd}, nil
}

// publishedFirmware finds revision want among the versions of model
// visible now, deprecated ones too; anything else is VALIDATION_FAILED on
// revision.
func (s *MountService) publishedFirmware(ctx context.Context, model string, want *semver.Version) (FirmwareVersion, error) {
	if s.firmware == nil {
		return FirmwareVersion{}, Errorf(CodeUnavailable, "the firmware catalogue is not available")
	}
	all, err := s.firmware.ModelFirmware(ctx, model, s.clock())
	if err != nil {
		return FirmwareVersion{}, err
	}
	for _, fw := range all {
		if v, err := semver.NewVersion(fw.SoftwareRevision); err == nil && v.Equal(want) {
			return fw, nil
		}
	}
	var v Validation
	v.Add("revision", "%s is not published for model %q", want.String(), model)
	return FirmwareVersion{}, v.Err()
}

// InstallFirmwareParams are the parameters of an INSTALL_FIRMWARE for fw,
// as the signed payload and data carry them.
func InstallFirmwareParams(fw FirmwareVersion) CommandParams {
	return CommandParams{"revision": fw.SoftwareRevision, "sha256": fw.SHA256, "size": strconv.FormatInt(fw.Size, 10)}
}
