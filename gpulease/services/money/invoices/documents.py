"""An invoice as CSV (one row per line, then the totals) and as PDF (reportlab), its labels
in Chinese and English. The PDF embeds the glyphs it uses from a CJK TrueType font on the
host (GPULEASE_PDF_FONT, else WenQuanYi Micro Hei or Zen Hei, Droid Sans Fallback or AR PL
UMing where installed: Debian's fonts-wqy-microhei), so it prints the same in any viewer;
without one it falls back to reportlab's STSong-Light, which viewers must supply. A line
without a recorded unit price shows its amount over its quantity."""

from __future__ import annotations

import csv
import io
import logging
import os
from collections.abc import Iterable
from decimal import Decimal
from functools import cache
from pathlib import Path
from xml.sax.saxutils import escape

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import mm
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.cidfonts import UnicodeCIDFont
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

from gpulease.domain.phrases import said_stored
from gpulease.domain.text import csv_cell
from gpulease.schemas.money import InvoiceLineView, InvoiceView
from gpulease.translations import translations

log = logging.getLogger(__name__)

FALLBACK_FONT = "STSong-Light"
EMBEDDED_FONT = "GpuleaseCJK"
FONT_FILES = ("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
              "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
              "/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf",
              "/usr/share/fonts/truetype/arphic/uming.ttc")
CSV_COLUMNS = ("seq", "kind", "instance_id", "description", "quantity", "unit",
               "unit_price", "service_from", "service_to", "net", "vat", "gross")


def _percent(rate: Decimal) -> str:
    return f"{(rate * 100).normalize():f}"


def _title(inv: InvoiceView) -> str:
    what = "Credit note" if inv.kind == "credit_note" else "Invoice"
    return f"{what} {inv.number or '(draft)'}"


def _buyer_facts(inv: InvoiceView) -> list[str]:
    b = inv.buyer
    if b is None:
        return [f"Customer: {inv.tenant_name} ({inv.tenant_id})"]
    kind = "专票 special VAT invoice" if b.invoice_type == "special" else "普票 ordinary invoice"
    facts = [f"Buyer (购买方): {b.title}" + (f", taxpayer id {b.tax_id}" if b.tax_id else "")
             + f" ({kind})"]
    if b.address or b.phone:
        facts.append(f"Address, phone: {b.address} {b.phone}".rstrip())
    if b.bank or b.bank_account:
        facts.append(f"Bank, account: {b.bank} {b.bank_account}".rstrip())
    return facts


class _cells:
    """A CSV writer whose text cells a spreadsheet shows as text, never runs as a formula
    (tenants write billing-profile fields and line descriptions: domain/text.py)."""

    def __init__(self, out: io.StringIO) -> None:
        self._w = csv.writer(out, lineterminator="\n")

    def writerow(self, cells: Iterable[object]) -> None:
        self._w.writerow([csv_cell(c) for c in cells])


def render_csv(inv: InvoiceView) -> str:
    out = io.StringIO()
    w = _cells(out)
    w.writerow(("invoice", inv.number or inv.id, "tenant", inv.tenant_name or inv.tenant_id,
                "period", inv.period, "status", inv.status, "currency", inv.currency))
    if inv.buyer is not None:
        b = inv.buyer
        w.writerow(("buyer", b.title, "tax_id", b.tax_id, "invoice_type", b.invoice_type,
                    "address", b.address, "phone", b.phone, "bank", b.bank,
                    "bank_account", b.bank_account))
    w.writerow(CSV_COLUMNS)
    for ln in inv.lines:
        w.writerow((ln.seq, ln.kind, ln.instance_id or "", ln.description,
                    "" if ln.quantity is None else f"{ln.quantity:f}", ln.unit or "",
                    "" if (u := unit_price_of(ln)) is None else f"{u:f}",
                    ln.service_from.isoformat() if ln.service_from else "",
                    ln.service_to.isoformat() if ln.service_to else "",
                    f"{ln.net:.2f}", f"{ln.vat:.2f}", f"{ln.gross:.2f}"))
    w.writerow(("", "total", "", f"VAT {_percent(inv.vat_rate)}%", "", "", "", "", "",
                f"{inv.net:.2f}", f"{inv.vat:.2f}", f"{inv.total:.2f}"))
    return out.getvalue()


def _yuan(v: Decimal) -> str:
    return f"¥{v:,.2f}"


@cache
def pdf_font() -> str:
    """The font the PDF is set in: a CJK TrueType font embedded (subset), else the CID
    font viewers supply."""
    wanted = os.environ.get("GPULEASE_PDF_FONT")
    for path in ([wanted] if wanted else []) + list(FONT_FILES):
        if path and Path(path).is_file():
            try:
                pdfmetrics.registerFont(TTFont(EMBEDDED_FONT, path, subfontIndex=0))
                return EMBEDDED_FONT
            except Exception as exc:  # reportlab embeds TrueType outlines only
                log.warning("cannot embed the font %s in invoice PDFs: %s", path, exc)
    log.warning("no CJK TrueType font found (install fonts-wqy-microhei or set "
                "GPULEASE_PDF_FONT): invoice PDFs use STSong-Light, not embedded")
    pdfmetrics.registerFont(UnicodeCIDFont(FALLBACK_FONT))
    return FALLBACK_FONT


def unit_price_of(ln: InvoiceLineView) -> Decimal | None:
    """The line's unit price, or its amount over its quantity where none was recorded."""
    if ln.unit_price is not None:
        return ln.unit_price
    if ln.quantity:
        return (ln.gross / ln.quantity).quantize(Decimal("0.01"))
    return None


def _described(ln: InvoiceLineView) -> str:
    """A line's description for the PDF (markup escaped): the English, and the Chinese
    under it where the platform wrote it as a phrase."""
    text = escape(ln.description)
    if ln.description_phrase:
        chinese = said_stored(ln.description, ln.description_phrase,
                              translations("zh_CN").gettext)
        if chinese != ln.description:
            text += "<br/>" + escape(chinese)
    return text


def render_pdf(inv: InvoiceView, issuer: str, issuer_tax_id: str = "") -> bytes:
    font = pdf_font()
    body = ParagraphStyle("body", fontName=font, fontSize=9, leading=12)
    head = ParagraphStyle("head", parent=body, fontSize=15, leading=19)
    buf = io.BytesIO()
    doc = SimpleDocTemplate(buf, pagesize=A4, leftMargin=15 * mm, rightMargin=15 * mm,
                            topMargin=15 * mm, bottomMargin=15 * mm, title=_title(inv),
                            author=issuer)
    facts = [f"Issuer 销售方: {issuer}" + (f" (tax id 税号 {issuer_tax_id})"
                                           if issuer_tax_id else ""),
             *_buyer_facts(inv), f"Period 账期: {inv.period}",
             f"Status 状态: {inv.status}"
             + (f", finalized {inv.finalized_at:%Y-%m-%d %H:%M} UTC" if inv.finalized_at
                else " (not an invoice until finalized)")]
    if inv.corrects:
        facts.append(f"Corrects: {inv.corrects}. Reason: {inv.reason}")
    vat_note = ("prices include VAT 价格含税" if inv.prices_include_vat
                else "VAT added to prices 价外税")
    rows: list[list[object]] = [["#", Paragraph("Description<br/>项目", body),
                                 Paragraph("Qty<br/>数量", body),
                                 Paragraph("Unit price<br/>单价", body),
                                 Paragraph("Net<br/>金额", body), Paragraph("VAT<br/>税额", body),
                                 Paragraph("Amount<br/>价税合计", body)]]
    for ln in inv.lines:
        qty = "" if ln.quantity is None else f"{ln.quantity:f} {ln.unit or ''}"
        unit = unit_price_of(ln)
        price = "" if unit is None else f"¥{unit:,.2f}"
        rows.append([str(ln.seq), Paragraph(_described(ln), body), qty, price,
                     _yuan(ln.net), _yuan(ln.vat), _yuan(ln.gross)])
    rows.append(["", Paragraph(f"Total 合计 ({inv.currency}, VAT {_percent(inv.vat_rate)}%, "
                               f"{vat_note})", body), "",
                 "", _yuan(inv.net), _yuan(inv.vat), _yuan(inv.total)])
    table = Table(rows, colWidths=[8 * mm, 70 * mm, 22 * mm, 22 * mm, 22 * mm, 18 * mm,
                                   24 * mm], repeatRows=1)
    table.setStyle(TableStyle([
        ("FONT", (0, 0), (-1, -1), font, 8), ("ALIGN", (2, 0), (-1, -1), "RIGHT"),
        ("LINEBELOW", (0, 0), (-1, 0), 0.5, colors.black),
        ("LINEABOVE", (0, -1), (-1, -1), 0.5, colors.black),
        ("VALIGN", (0, 0), (-1, -1), "TOP")]))
    story = [Paragraph(escape(_title(inv)), head), Spacer(1, 4 * mm),
             *[Paragraph(escape(f), body) for f in facts], Spacer(1, 6 * mm), table]
    if inv.digest:
        story += [Spacer(1, 6 * mm), Paragraph(f"Seal (sha256): {inv.digest}", body)]
    doc.build(story)
    return buf.getvalue()


EXPORT_COLUMNS = ("number", "kind", "corrects", "period", "finalized_at", "buyer", "tax_id",
                  "invoice_type", "address", "phone", "bank", "bank_account", "email",
                  "seq", "description", "quantity", "unit", "unit_price", "service_from",
                  "service_to", "net", "vat_rate", "vat", "gross", "payment_status")


def render_export_csv(invoices: list[InvoiceView]) -> str:
    """A month's final invoices and credit notes, one row per line with the buyer on each:
    what a fapiao system imports (UTF-8 with a BOM, so spreadsheet programs read the
    Chinese names)."""
    out = io.StringIO()
    out.write("\ufeff")
    w = _cells(out)
    w.writerow(EXPORT_COLUMNS)
    for inv in invoices:
        b = inv.buyer
        buyer = ((b.title, b.tax_id, b.invoice_type, b.address, b.phone, b.bank,
                  b.bank_account, b.email) if b else (inv.tenant_name, "", "", "", "", "", "",
                                                      ""))
        for ln in inv.lines:
            w.writerow((inv.number, inv.kind, inv.corrects or "", inv.period,
                        inv.finalized_at.isoformat() if inv.finalized_at else "", *buyer,
                        ln.seq, ln.description,
                        "" if ln.quantity is None else f"{ln.quantity:f}", ln.unit or "",
                        "" if (u := unit_price_of(ln)) is None else f"{u:f}",
                        ln.service_from.isoformat() if ln.service_from else "",
                        ln.service_to.isoformat() if ln.service_to else "",
                        f"{ln.net:.2f}", f"{inv.vat_rate:f}", f"{ln.vat:.2f}",
                        f"{ln.gross:.2f}", inv.payment_status or ""))
    return out.getvalue()
