"""The console in Chinese and English: the language follows the switch (a cookie, and the
signed-in user's setting, which follows them to another browser), else the browser's
Accept-Language, else English; every page renders in both; the Chinese catalog has every
message the templates and code mark, with the same placeholders; money and dates are
written the locale's way. SQLite and PostgreSQL where data is involved."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po
from fastapi.testclient import TestClient

from gpulease.api.app import create_app
from gpulease.domain.errors import DomainError, PaymentRequired
from gpulease.domain.locales import choose, from_accept_language, from_environment, known
from gpulease.domain.phrases import Phrase, phrase
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.accounts import users
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import new_tenant
from gpulease.testing.factories import deliver
from gpulease.web import i18n
from gpulease.worker.runner import Worker
from tests.web.console import ORDER, signed_in

ROOT = Path(__file__).resolve().parents[2]
ZH = {"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8"}


def test_the_language_a_browser_asks_for() -> None:
    assert known("zh-CN") == known("zh_cn") == known("zh-Hans-CN") == known("zh") == "zh_CN"
    assert known("en-US") == "en" and known("fr") is None and known("zh-TW") is None
    assert known("not a tag!") is None and known("") is None
    assert from_accept_language("fr-FR,fr;q=0.9,zh-CN;q=0.8,en;q=0.7") == "zh_CN"
    assert from_accept_language("en;q=0.5, zh;q=0.9") == "zh_CN"  # by q, not by order
    assert from_accept_language("de, fr;q=x") is None
    assert from_accept_language("zh;q=0, en") == "en"  # q=0: not wanted
    assert choose("en", "zh_CN", "zh-CN") == "en"  # the switch's cookie first
    assert choose(None, "zh_CN", "en") == "zh_CN" and choose(None, None, None) == "en"


def test_the_language_a_terminal_asks_for() -> None:
    assert from_environment({"LANG": "zh_CN.UTF-8"}) == "zh_CN"
    assert from_environment({"LANG": "zh_CN.UTF-8", "LC_ALL": "C.UTF-8"}) is None  # LC_ALL
    assert from_environment({"LANGUAGE": "fr:zh_CN", "LANG": "en_US.UTF-8"}) == "zh_CN"
    assert from_environment({"LC_MESSAGES": "en_GB.UTF-8@euro"}) == "en"
    assert from_environment({"GPULEASE_LANG": "zh-CN", "LANG": "en_US.UTF-8"}) == "zh_CN"
    assert from_environment({"LANG": "de_DE.UTF-8"}) is None and from_environment({}) is None
    assert from_environment({"LANG": "", "LC_ALL": "zh_CN"}) == "zh_CN"  # empty: unset


def test_money_and_dates_the_locale_way() -> None:
    at = datetime(2026, 12, 2, 4, 10, 5, tzinfo=UTC)
    assert i18n.moment(at, "en") == "Dec 2, 2026, 04:10 UTC"
    assert i18n.moment(at, "zh_CN", seconds=True) == "2026年12月2日 04:10:05 UTC"
    assert i18n.money(Decimal("84480"), "zh_CN") == "¥84,480.00" == i18n.money(84480, "en")
    assert i18n.money(None, "en") == "—"


def _placeholders(text: str) -> set[str]:
    """gettext's %(name)s and the phrases' {name!r:spec} fields (`{{` is a brace)."""
    return (set(re.findall(r"%\((\w+)\)[sd]", text))
            | set(re.findall(r"(?<!\{)\{(\w+(?:![rs])?(?::[^{}]*)?)\}", text)))


def _error_keywords() -> dict[str, tuple[int, ...] | None]:
    """Every error whose sentence is a message: each DomainError, and the domain's input
    errors (their field comes first). The Makefile's `make messages` must name them all."""
    def family(cls: type) -> set[type]:
        return {cls}.union(*(family(c) for c in cls.__subclasses__()))
    field_first = {"InvalidInput", "PricingError", "SizingError"}
    names = {c.__name__ for c in family(DomainError)} | {"PricingError", "SizingError"}
    makefile = (ROOT / "Makefile").read_text()
    assert all(re.search(rf"\b{n}\b", makefile) for n in names), names
    return {n: (2,) if n in field_first else None for n in names}


def test_the_chinese_catalog_has_every_message_with_its_placeholders() -> None:
    marked = {found[2] for found in extract_from_dir(
        str(ROOT / "gpulease"), method_map=[
            ("**.py", "python"), ("web/templates/**.html", "jinja2")],
        options_map={"web/templates/**.html": {"extensions": "jinja2.ext.i18n"}},
        keywords={"_": None, "gettext": None, "N_": None, "phrase": None,
                  **_error_keywords()})}
    with (ROOT / "gpulease/locale/zh_CN/LC_MESSAGES/console.po").open("rb") as f:
        catalog = read_po(f)
    assert len(marked) > 800  # the extraction found the templates, refusals and notices
    translated = {m.id: m.string for m in catalog if m.id and m.string and not m.fuzzy}
    missing = sorted(m for m in marked if isinstance(m, str) and m not in translated)
    assert not missing, f"translate these (make messages, then the .po): {missing}"
    wrong = [m for m, zh in translated.items() if _placeholders(m) != _placeholders(zh)]
    assert not wrong, f"the translation's placeholders differ: {wrong}"


def test_a_phrase_is_said_in_the_readers_language_and_falls_back_to_english() -> None:
    zh = i18n.translations("zh_CN").gettext
    short = PaymentRequired("{what} ¥{amount:,.2f}; your balance ¥{wallet_balance:,.2f} with "
                            "credit limit ¥{wallet_credit_limit:,.2f} leaves ¥{missing:,.2f} "
                            "missing. Top up your account, then try again.", Decimal("10"),
                            what=phrase("This costs"), amount=Decimal("84480"),
                            wallet_balance=Decimal("100"), wallet_credit_limit=Decimal("0"),
                            missing=Decimal("84380"))
    assert short.detail.startswith("This costs ¥84,480.00; your balance ¥100.00")
    assert short.said(zh) == ("费用为¥84,480.00；您的余额 ¥100.00 加信用额度 ¥0.00 还差 "
                              "¥84,380.00。请为账户充值后重试。")
    unknown = phrase("Not in any catalog: {x}.", x=3)
    assert unknown.said(zh) == "Not in any catalog: 3." == str(unknown)
    broken = Phrase("Tenant {tenant} is closed already.", {"tenant_name": "acme"})
    with pytest.raises(KeyError):
        broken.said()
    stored = phrase("Ticket {ticket} ({severity}): {text}", ticket="t-1", severity="P1",
                    text=phrase("opened: {summary}", summary="GPU 3 fell off the bus"))
    again = Phrase.from_json(json.loads(json.dumps(stored.to_json())))
    assert again.said(zh) == "工单 t-1（P1）：已开启：GPU 3 fell off the bus"
    assert str(again) == "Ticket t-1 (P1): opened: GPU 3 fell off the bus"


def test_the_switch_the_users_setting_and_the_browsers_language(platform: Platform) -> None:
    t = new_tenant(platform)
    with TestClient(create_app(platform)) as client:
        page = client.get("/console/login", headers=ZH)
        assert '<html lang="zh-CN">' in page.text and "登录 gpulease" in page.text
        assert '<html lang="en">' in client.get("/console/login").text
        missing = client.get("/console/no-such-page", headers=ZH)
        assert missing.status_code == 404 and "控制台中没有这个页面" in missing.text
        wrong = client.post("/console/login", headers=ZH, data={
            "email": "nobody@example.com", "password": "not a password"})
        assert wrong.status_code == 401 and "邮箱或密码错误" in wrong.text  # the refusal too

        signed_in(platform, t, client)
        switched = client.post("/console/lang", data={"to": "zh-CN", "back": "/console/billing"},
                               follow_redirects=False)
        assert switched.status_code == 303 and switched.headers["location"] == "/console/billing"
        assert client.cookies.get("gpulease_lang") == "zh_CN"
        assert users.locale_of(platform, t.principal.user_id) == "zh_CN"
        assert "账单" in client.get("/console/billing").text  # no header needed now
        away = client.post("/console/lang", data={"to": "en", "back": "https://evil.example/"},
                           follow_redirects=False)
        assert away.headers["location"] == "/console/"  # back only into the console

    users.set_locale(platform, t.principal, "zh_CN")
    with TestClient(create_app(platform)) as other_browser:  # no cookie, English browser
        signed_in(platform, t, other_browser, again=True)
        assert other_browser.cookies.get("gpulease_lang") == "zh_CN"
        assert '<html lang="zh-CN">' in other_browser.get("/console/").text


def test_a_user_sets_their_language_through_the_api(platform: Platform) -> None:
    t = new_tenant(platform)
    with TestClient(create_app(platform)) as client:
        auth = {"Authorization": f"Bearer {t.token}"}
        bad = client.put("/api/v1/me/locale", json={"locale": "fr"}, headers=auth)
        assert bad.status_code == 422 and "zh_CN" in bad.text and "locale" in bad.text
        done = client.put("/api/v1/me/locale", json={"locale": "zh-CN"}, headers=auth)
        assert done.status_code == 200 and done.json()["locale"] == "zh_CN"
        back = client.put("/api/v1/me/locale", json={"locale": None}, headers=auth)
        assert back.json()["locale"] is None


@pytest.mark.parametrize("lang", ["en", "zh_CN"])
def test_every_tenant_page_renders_in_both_languages(
        fleet: Platform, worker: Worker, key: str, lang: str) -> None:
    t = new_tenant(fleet)
    iid = deliver(fleet, t, worker, key)
    with TestClient(create_app(fleet)) as client:
        signed_in(fleet, t, client)
        client.cookies.set("gpulease_lang", lang)
        pages = {"/console/": None, "/console/catalog": None, "/console/billing": None,
                 f"/console/instances/{iid}": None, f"/console/instances/{iid}/release": None,
                 "/console/order?sku=h100-80g-x8&region=ningxia-1": None,
                 "/console/order?offer=rtx4090-24g-container": None,
                 "/console/advise?params=7B&workload=lora&hours=24": None,
                 "/console/account": None}
        for url in pages:
            answer = client.get(url)
            assert answer.status_code == 200, (url, answer.text[-500:])
            assert f'<html lang="{lang.replace("_", "-")}">' in answer.text
        review = client.post("/console/orders", data=ORDER | {"ssh_key": key})
        assert review.status_code == 200
        renewal = client.post(f"/console/instances/{iid}/renew", data={"periods": "1"})
        assert renewal.status_code == 200
        instance = client.get(f"/console/instances/{iid}").text
        billing = client.get("/console/billing").text
        if lang == "zh_CN":
            # the ledger's references the platform wrote: the hold, its release, the charge
            assert f"{iid} 的首月" in billing and f"{iid} 已交付" in billing
            assert f"{iid} 的首月（h100-80g-x8）" in billing and "first month" not in billing
            assert "确认订单" in review.text and "增值税" in review.text
            assert "租期" in instance and "运行验收测试（第 5 步，共 7 步）" in instance
            assert "运行验收测试（第 5 步，共 7 步） — 结果" in instance  # the step's note
            assert ">verify result<" not in instance  # (the code stays in its title)
            assert "续费" in renewal.text
            # the history the platform wrote, in the page's language too
            assert "验收通过（模拟）：共 53 项检查，0 项失败" in instance
            # the acceptance report's requirements and details the checks wrote
            assert "且无升向上限的趋势；无降频、XID、ECC 增长" in instance
            assert "个采样，" in instance and "not heading there" not in instance
            advised = client.get("/console/advise?params=70B&workload=lora&hours=24").text
            assert "70B × 2 字节 × 1.2 ≈ 168 GB → 至少 3 张 80 GB 显卡" in advised
            assert "模型结构由参数量推断" in advised and "小时，¥" in advised
        else:
            assert f"first month of {iid}" in billing and f"delivered {iid}" in billing
            assert f"first month of {iid} (h100-80g-x8)" in billing
            assert "running the acceptance tests, 5 of 7" in instance
            assert "running the acceptance tests, 5 of 7 — result" in instance
            assert "acceptance passed (simulated): 53 checks, 0 failed" in instance
        api = client.get(f"/api/v1/instances/{iid}",
                         headers={"Authorization": f"Bearer {t.token}"}).json()
        said = [st["message"] for st in api["stages"] if st["message"]]
        assert "acceptance passed (simulated): 53 checks, 0 failed" in said  # English
        assert all("phrase" not in st for st in api["stages"])
        ledger = client.get("/api/v1/wallet/ledger",
                            headers={"Authorization": f"Bearer {t.token}"}).json()
        references = [e["reference"] for e in ledger["items"]]
        assert f"first month of {iid}" in references  # the API keeps the English
        assert all("phrase" not in e for e in ledger["items"])
        # a move's reason as the platform said it: on the page in its language, English
        # in the API
        actions.release_instance(fleet, t.principal, iid)
        released = client.get(f"/console/instances/{iid}").text
        reason = re.search(r'id="reason">([^<]*)<', released)
        assert reason and reason.group(1) == {"en": "released by tenant",
                                              "zh_CN": "租户已释放"}[lang]
        assert client.get(f"/api/v1/instances/{iid}", headers={
            "Authorization": f"Bearer {t.token}"}).json()["status_reason"] == (
            "released by tenant")


def test_refusals_with_figures_are_said_in_chinese_on_the_page_and_in_the_api(
        fleet: Platform, key: str) -> None:
    poor, rich = new_tenant(fleet, funds="100"), new_tenant(fleet)
    body = {"kind": "bare_metal", "sku": ORDER["sku"], "region": ORDER["region"],
            "term": "month", "ssh_keys": [key]}
    with TestClient(create_app(fleet)) as client:
        api = {"Authorization": f"Bearer {poor.token}"}
        english = client.post("/api/v1/instances", json=body, headers=api)
        chinese = client.post("/api/v1/instances", json=body, headers=api | ZH)
        assert english.status_code == chinese.status_code == 402
        assert english.json()["missing"] == chinese.json()["missing"]  # the same refusal
        missing = Decimal(chinese.json()["missing"])
        assert "leaves ¥" in english.json()["detail"]
        assert f"还差 ¥{missing:,.2f}。请为账户充值后重试。" in chinese.json()["detail"]

        signed_in(fleet, poor, client)
        client.post("/console/lang", data={"to": "zh-CN", "back": "/console/"})
        paid = client.post("/console/orders", data=ORDER | {"ssh_key": key,
                                                            "confirmed": "true"})
        said = re.findall(r'role="alert">([^<]*)', paid.text)
        assert paid.status_code == 402 and said and "还差 ¥" in said[0], said
        assert "请为账户充值后重试" in said[0] and "missing" not in paid.text

        for _ in range(2):  # the demo fleet has two servers of the offer
            orders.place_order(fleet, rich.principal, OrderRequest(**body))
        signed_in(fleet, rich, client)
        sold = client.post("/console/orders", data=ORDER | {"ssh_key": key,
                                                            "confirmed": "true"})
        assert sold.status_code == 409, sold.text[-800:]
        assert f"{ORDER['region']} 没有空闲的 {ORDER['sku']} 节点（空闲 0 台）" in sold.text
        assert "当前空闲：" in sold.text and "No free" not in sold.text


def test_a_fields_refusal_is_said_in_the_readers_language(platform: Platform) -> None:
    t = new_tenant(platform)
    api = {"Authorization": f"Bearer {t.token}"}
    bad = {"instance_id": "i-000000000000", "summary": "x" * 10, "gpu": "three"}
    with TestClient(create_app(platform)) as client:
        english = client.post("/api/v1/tickets", json=bad, headers=api).json()
        chinese = client.post("/api/v1/tickets", json=bad, headers=api | ZH).json()
    assert english["detail"].startswith("Fix these fields and resend: gpu: Input should be")
    assert chinese["detail"] == "请修正这些字段后重新提交：gpu：请填写整数。"
    assert english["errors"] == chinese["errors"] and chinese["field"] == "gpu"


def test_a_kept_phrase_keeps_its_figures_types() -> None:
    from datetime import datetime as dt

    from gpulease.domain.phrases import said_stored, stored

    kept = phrase("¥{refund:,.2f} refunded at {at:%H:%M}: {n} × {what}", refund=Decimal(
        "1234.5"), at=dt(2026, 12, 2, 8, 30, tzinfo=UTC), n=3, what=phrase("month"))
    english, as_json = stored(kept)
    assert english == "¥1,234.50 refunded at 08:30: 3 × month"
    assert said_stored(english, as_json) == english
    assert said_stored(english, as_json, i18n.translations("zh_CN").gettext).endswith("3 × 月")


def test_an_agents_phrases_are_said_only_when_plain() -> None:
    from gpulease.domain.fleet.acceptance import _check
    from gpulease.domain.phrases import well_formed
    from gpulease.ports.agent import CheckResult

    ours = _check("burnin", False, 91.0, "°C max", phrase("runs the checks"), 3,
                  phrase("GPU at {temp:.0f} °C, ceiling {ceiling:.0f} °C", temp=91.0,
                         ceiling=87.0))
    assert ours.detail == "GPU at 91 °C, ceiling 87 °C"  # the English kept as text
    kept = CheckResult.model_validate(asdict(ours))
    assert set(kept.phrases) == {"threshold", "detail"}
    zh = i18n.translations("zh_CN").gettext
    from gpulease.domain.phrases import said_stored
    assert said_stored(kept.detail, kept.phrases["detail"], zh) == "GPU 温度 91 °C，上限 87 °C"
    # a template that looks into its values, or names a value it lacks, is dropped
    for hostile in ({"template": "{t.__class__.__mro__}", "params": {"t": "x"}},
                    {"template": "{t[0]}", "params": {"t": "x"}},
                    {"template": "{missing}", "params": {}},
                    {"template": "{t}", "params": {"t": {"object": 1}}},
                    {"template": "{t", "params": {"t": 1}},
                    {"template": "{t}", "params": {"t": {"decimal": "abc"}}},
                    {"template": "{t}", "params": {"t": {"datetime": "yesterday"}}},
                    {"template": "x", "params": {f"p{i}": 1 for i in range(51)}}):
        assert not well_formed(hostile), hostile
        got = CheckResult.model_validate({"name": "x", "passed": True, "detail": "plain",
                                          "phrases": {"detail": hostile}})
        assert got.phrases == {}


def test_a_fault_its_alert_and_its_ticket_are_said_in_chinese(
        fleet: Platform, worker: Worker, key: str) -> None:
    from gpulease.demo_agents import DemoAgents
    from gpulease.services.accounts import identity as accounts
    from gpulease.services.fleet import node_changes
    from gpulease.services.support import tickets

    t = new_tenant(fleet)
    iid = deliver(fleet, t, worker, key)
    node = instances.show_instance(fleet, t.principal, iid).nodes[0].name
    _, op = accounts.create_operator(fleet, "ops-zh@example.com", "Ops")
    node_changes.inject_faults(fleet, accounts.authenticate(fleet, op.token), node,
                               ["xid79:3"])
    DemoAgents(fleet).tick()
    (ticket,) = tickets.list_tickets(fleet, t.principal).items
    assert ticket.summary == "GPU 3 not responding (XID 79: fell off the bus)"  # English
    with TestClient(create_app(fleet)) as client:
        signed_in(fleet, t, client)
        client.cookies.set("gpulease_lang", "zh_CN")
        listed = client.get("/console/tickets").text
        assert "GPU 3 无响应（XID 79：已从总线掉线）" in listed
        shown = client.get(f"/console/tickets/{ticket.id}").text
        assert "GPU 3 无响应（XID 79：已从总线掉线）</h1>" in shown
        assert "节点代理 告警：GPU 3（" in shown and "报告 XID 79：已从总线掉线" in shown
        page = client.get(f"/console/instances/{iid}").text
        assert "报告 XID 79：已从总线掉线；该节点需要硬件检查" in page
        api = client.get(f"/api/v1/tickets/{ticket.id}",
                         headers={"Authorization": f"Bearer {t.token}"}).json()
        assert api["summary"] == ticket.summary and "summary_phrase" not in api


def test_a_failed_order_says_why_in_the_readers_language(
        fleet: Platform, worker: Worker, key: str) -> None:
    from gpulease.testing.factories import sim

    t = new_tenant(fleet)
    view, _ = orders.place_order(fleet, t.principal, OrderRequest(
        kind="container", offer="rtx4090-24g-container", gpus=1, ssh_keys=[key]))
    sim(fleet).inject_fault(view.nodes[0].name, "runtime_start", "permanent")
    worker.run_until_idle()
    failed = instances.show_instance(fleet, t.principal, view.id)
    assert failed.status == "failed"
    assert failed.status_reason and failed.status_reason.startswith("container start failed: ")
    with TestClient(create_app(fleet)) as client:
        signed_in(fleet, t, client)
        client.cookies.set("gpulease_lang", "zh_CN")
        page = client.get(f"/console/instances/{view.id}").text
        reason = re.search(r'id="reason">([^<]*)<', page)
        assert reason and reason.group(1).startswith("容器启动失败：")  # the driver's error as is


def test_the_default_catalogs_add_ons_are_said_in_the_readers_language() -> None:
    """The add-on names of the shipped catalog are messages (kept in step with the file),
    so an add-on's invoice and ledger line reads in Chinese; an operator's own name is
    said as written."""
    import tomllib

    from gpulease.db.money_tables import InstanceAddon
    from gpulease.services.money.addons import PeriodCharge
    from gpulease.translations import DEFAULT_ADDON_NAMES

    shipped = tomllib.loads((ROOT / "gpulease/data/catalog.toml").read_text())
    assert {a["name"] for a in shipped["addons"]} == set(DEFAULT_ADDON_NAMES)
    zh = i18n.translations("zh_CN").gettext
    row = InstanceAddon(instance_id="i-1", addon_id="public-bandwidth",
                        name="Public bandwidth (BGP), per Mbps per month",
                        quantity=Decimal("100"), unit="mbps-month", unit_price=Decimal("25"))
    item = PeriodCharge(row, Decimal("100"), Decimal("2500")).item
    assert str(item) == "Public bandwidth (BGP), per Mbps per month: 100 · i-1"
    assert item.said(zh) == "公网带宽（BGP），按 Mbps 每月计费：100 · i-1"
    row.name = "带宽（运营商自定义）"
    assert PeriodCharge(row, Decimal("1"), Decimal("1")).item.said(zh).startswith(
        "带宽（运营商自定义）：")


def test_the_order_review_says_its_lines_in_the_readers_language(
        fleet: Platform, key: str) -> None:
    """The quote's lines on the review before paying: the server line and each add-on in
    Chinese for a Chinese reader, the English kept in the API's quote."""
    t = new_tenant(fleet)
    with TestClient(create_app(fleet)) as client:
        signed_in(fleet, t, client)
        client.post("/console/lang", data={"to": "zh-CN", "back": "/console/"})
        review = client.post("/console/orders", data=ORDER | {"ssh_key": key})
        assert review.status_code == 200
        assert "裸金属服务器，按月计费" in review.text and "bare-metal server" not in review.text
        assert "公网带宽（BGP），按 Mbps 每月计费" in review.text
        assert "您自有软件的技术协助（驱动、CUDA、NCCL、框架），工作时间，按月计费" in review.text
        quoted = client.post("/api/v1/quotes", json={
            "sku": ORDER["sku"], "region": ORDER["region"], "add": {"public-bandwidth": "100"}},
            headers={"Authorization": f"Bearer {t.token}"} | ZH)
        lines = quoted.json()["lines"]
        assert "bare-metal server, per month" in lines[0]["description"]
        assert "phrase" not in lines[0]
