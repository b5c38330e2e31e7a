"""OS images the platform builds itself (`gpulease image build`): a Debian system made from
Debian's packages, laid out as a bootable raw disk image without loop devices or mounts."""
