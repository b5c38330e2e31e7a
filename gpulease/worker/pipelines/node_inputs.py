"""What a node step needs, read in the claiming transaction: the job snapshot, and the
config drive a deploy (or a real agent's cleaning ramdisk) boots with."""

from __future__ import annotations

import secrets
from dataclasses import replace

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gpulease.configdrive import ConfigDriveSpec, build_iso
from gpulease.db.repositories import share_instance_first
from gpulease.db.tables import AgentEnrollment, ConfigDrive, Instance, Node
from gpulease.domain.states import NodeStage
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint
from gpulease.security import hash_token
from gpulease.services.agents.credentials import mint_enrollment
from gpulease.services.agents.node_agent import agent_for
from gpulease.services.catalog.images import find_image
from gpulease.services.fleet.ramdisk_boots import drop_boots
from gpulease.services.platform.sites import media_base
from gpulease.services.support.repairs import burn_in_due
from gpulease.worker.pipelines.node_steps import StepInput


def _image_url(s: Session, p: Platform, image_id: str, region: str) -> str:
    image = find_image(s, p, image_id)
    if image and image.url:
        return image.url
    return f"{media_base(p, region)}/{image_id}.iso"


def step_input(s: Session, p: Platform, node: Node, inst: Instance | None) -> StepInput:
    password = ""
    if inst is not None and inst.root_password_enc and node.stage in (
            NodeStage.CONFIGURE, NodeStage.ATTACH_MEDIA):
        password = p.box.open(inst.root_password_enc)
    return StepInput(
        node_id=node.id, node_name=node.name, stage=node.stage or "", region=node.region,
        bmc_driver=node.bmc_driver,
        endpoint=BmcEndpoint(node.name, node.bmc_address, node.bmc_username,
                             p.box.open(node.bmc_password_enc)),
        instance_id=node.instance_id,
        image_url=_image_url(s, p, inst.image_id, node.region) if inst else "",
        agent_media_url=f"{media_base(p, node.region)}/agent-ramdisk.iso",
        ssh_keys=tuple(inst.ssh_keys.splitlines()) if inst else (),
        root_password=password,
        hostname=(inst.name or inst.id) if inst else node.name,
        encrypted_data=bool(inst.encrypted_data) if inst else False,
        polls=node.stage_polls or 0, requests=node.stage_requests or 0,
        config_drive_url=_existing_drive_url(s, p, node, inst),
        acceptance=p.catalog.marks(node.sku, node.region)
        if node.stage in (NodeStage.VERIFY, NodeStage.RETURN_VERIFY) or (
            node.stage == NodeStage.BURN_IN and burn_in_due(s, node.id) is not None)
        else None,
        agent_kind=node.agent_kind,
        stage_started_at=node.stage_started_at,
        boot=offer.boot if (offer := p.catalog.offer(node.sku, node.region)) else
        "virtual_media",
        http_boot_uri=p.settings.http_boot_uri or None,
        deploy=offer.deploy if offer else "installer",
        image_id=inst.image_id if inst else "",
    )


def _drive_url(p: Platform, drive_id: str) -> str:
    return f"{p.settings.public_url.rstrip('/')}/media/config/{drive_id}.iso"


def needs_drive(p: Platform, stage: str | None, agent_kind: str, bmc_driver: str) -> bool:
    """Deploys carry a config drive; so does the cleaning ramdisk of an agent that enrolls
    from one (its one-time enrollment token)."""
    return stage in (NodeStage.ATTACH_MEDIA, NodeStage.BOOT_DISK) or (
        stage == NodeStage.CLEAN_ATTACH_MEDIA
        and agent_for(p, agent_kind, bmc_driver).enrolls_from_config_drive)


def _existing_drive_url(s: Session, p: Platform, node: Node, inst: Instance | None) -> str | None:
    if inst is None or not needs_drive(p, node.stage, node.agent_kind, node.bmc_driver):
        return None
    drive_id = s.scalar(select(ConfigDrive.id).where(ConfigDrive.node_id == node.id,
                                                     ConfigDrive.instance_id == inst.id))
    return _drive_url(p, drive_id) if drive_id else None


def make_config_drive(p: Platform, job: StepInput) -> StepInput:
    """Build the deploy's config drive outside any transaction, store it, and return the
    job with the URL the BMC will fetch it from."""
    assert job.instance_id is not None
    agent_token = "glat_" + secrets.token_urlsafe(32)
    spec = ConfigDriveSpec(  # no SSH key or password: they come at configure, after verify
        instance_id=job.instance_id, hostname=job.hostname, agent_url=p.settings.guest_url,
        agent_token=agent_token, encrypted_data=job.encrypted_data)
    with p.db.read() as s:
        node = s.get(Node, job.node_id)
        offer = p.catalog.offer(node.sku, node.region) if node is not None else None
    if offer is not None and node is not None:  # the offer's disk, GPU backend, fabric NIC
        spec = replace(spec, data_disk_device=offer.data_disk_device,
                       agent_backend=offer.agent_backend,
                       agent_gpus=p.catalog.sku_by_id[offer.sku].gpu_count,
                       fabric_nic=offer.fabric_nic if node.fabric_id else None)
    iso = build_iso(spec)
    drive_id = secrets.token_urlsafe(32)
    with p.db.write() as s:
        share_instance_first(s, job.instance_id)
        s.add(ConfigDrive(id=drive_id, node_id=job.node_id, instance_id=job.instance_id,
                          agent_token_hash=hash_token(agent_token), iso=iso,
                          created_at=p.clock.now()))
        mint_enrollment(s, job.node_id, job.instance_id, p.clock.now(), token=agent_token)
    return replace(job, config_drive_url=_drive_url(p, drive_id))


def drop_config_drives(s: Session, node_id: str) -> None:
    """The deploy (or cleaning) is over: its drives go, and the one-time agent token on
    them dies with them if no agent used it; so do its ramdisk boots."""
    s.execute(delete(AgentEnrollment).where(
        AgentEnrollment.used_at.is_(None),
        AgentEnrollment.token_hash.in_(select(ConfigDrive.agent_token_hash)
                                       .where(ConfigDrive.node_id == node_id)))
        .execution_options(synchronize_session=False))
    s.execute(delete(ConfigDrive).where(ConfigDrive.node_id == node_id))
    drop_boots(s, node_id)  # an image deploy's ramdisk boots, and their ISOs
