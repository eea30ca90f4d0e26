"""The words business documents print, in six languages: the labels of their keys (with the synonyms and
abbreviations real documents use), titles, column headings, month names, number and date formats.

Used by :mod:`.business`. Each language's keys are tuples of wordings; a page picks one wording per key.
"""

from __future__ import annotations

import datetime
import random

LANGUAGES = ("en", "fr", "de", "nl", "es", "it")
LOCALES = {"en": "en_GB", "fr": "fr_FR", "de": "de_DE", "nl": "nl_NL", "es": "es_ES", "it": "it_IT"}
"""Faker's locale for each language's names, companies and addresses."""

KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    "number": {
        "en": ("Invoice no.", "Invoice #", "Invoice number", "Inv. No.", "Document no."),
        "fr": ("N° de facture", "Facture n°", "Numéro de facture", "N° facture"),
        "de": ("Rechnungsnummer", "Rechnungs-Nr.", "Rechnung Nr.", "Re.-Nr.", "Beleg-Nr."),
        "nl": ("Factuurnummer", "Factuurnr.", "Factuur nr."),
        "es": ("Nº de factura", "Número de factura", "Factura n.º", "N.º factura"),
        "it": ("Numero fattura", "Fattura n.", "N. fattura", "Fattura numero"),
    },
    "date": {
        "en": ("Invoice date", "Date", "Date of issue", "Issue date"),
        "fr": ("Date de facture", "Date", "Date d'émission", "Émise le"),
        "de": ("Rechnungsdatum", "Datum", "Ausstellungsdatum", "Belegdatum"),
        "nl": ("Factuurdatum", "Datum", "Datum factuur"),
        "es": ("Fecha de factura", "Fecha", "Fecha de emisión"),
        "it": ("Data fattura", "Data", "Data di emissione", "Data documento"),
    },
    "due date": {
        "en": ("Due date", "Payment due", "Pay by", "Due by"),
        "fr": ("Date d'échéance", "Échéance", "À payer avant le"),
        "de": ("Fälligkeitsdatum", "Fällig am", "Zahlbar bis", "Zahlungsziel"),
        "nl": ("Vervaldatum", "Te betalen voor", "Uiterste betaaldatum"),
        "es": ("Fecha de vencimiento", "Vencimiento", "Pagar antes de"),
        "it": ("Data di scadenza", "Scadenza", "Da pagare entro"),
    },
    "delivery date": {
        "en": ("Delivery date", "Shipped on", "Date of supply"),
        "fr": ("Date de livraison", "Livré le"),
        "de": ("Lieferdatum", "Leistungsdatum", "Geliefert am"),
        "nl": ("Leverdatum", "Geleverd op"),
        "es": ("Fecha de entrega", "Entregado el"),
        "it": ("Data di consegna", "Consegnato il"),
    },
    "order number": {
        "en": ("Order no.", "PO number", "Purchase order", "Your order"),
        "fr": ("N° de commande", "Bon de commande", "Votre commande"),
        "de": ("Bestellnummer", "Auftrags-Nr.", "Ihre Bestellung"),
        "nl": ("Bestelnummer", "Ordernummer", "Uw order"),
        "es": ("Nº de pedido", "Pedido", "Su pedido"),
        "it": ("Numero ordine", "Ordine n.", "Vs. ordine"),
    },
    "customer number": {
        "en": ("Customer no.", "Customer ID", "Account no."),
        "fr": ("N° client", "Code client", "Réf. client"),
        "de": ("Kundennummer", "Kunden-Nr.", "Kd.-Nr."),
        "nl": ("Klantnummer", "Klantnr.", "Debiteurnummer"),
        "es": ("Nº de cliente", "Código de cliente", "Cliente nº"),
        "it": ("Codice cliente", "Cliente n.", "Cod. cliente"),
    },
    "subtotal": {
        "en": ("Subtotal", "Net amount", "Net total"),
        "fr": ("Total HT", "Sous-total", "Montant HT"),
        "de": ("Zwischensumme", "Nettobetrag", "Summe netto"),
        "nl": ("Subtotaal", "Totaal excl. btw", "Netto bedrag"),
        "es": ("Subtotal", "Base imponible", "Importe neto"),
        "it": ("Imponibile", "Subtotale", "Totale imponibile"),
    },
    "tax": {
        "en": ("VAT", "Tax", "Sales tax", "VAT amount"),
        "fr": ("TVA", "Montant TVA", "Total TVA"),
        "de": ("MwSt.", "USt.", "Mehrwertsteuer", "Umsatzsteuer"),
        "nl": ("BTW", "Btw-bedrag", "Btw"),
        "es": ("IVA", "Impuestos", "Cuota IVA"),
        "it": ("IVA", "Imposta", "Totale IVA"),
    },
    "total": {
        "en": ("Total", "Amount due", "Grand total", "Total due", "Balance due"),
        "fr": ("Total TTC", "Montant total", "Net à payer", "Total à payer"),
        "de": ("Gesamtbetrag", "Rechnungsbetrag", "Gesamtsumme", "Zu zahlen"),
        "nl": ("Totaal", "Te betalen", "Totaalbedrag", "Totaal incl. btw"),
        "es": ("Total", "Importe total", "Total a pagar", "Total factura"),
        "it": ("Totale", "Totale fattura", "Importo totale", "Totale da pagare"),
    },
    "buyer": {
        "en": ("Bill to", "Invoice to", "Customer", "Billed to"),
        "fr": ("Facturé à", "Client", "Adresse de facturation"),
        "de": ("Rechnungsempfänger", "Kunde", "Rechnungsadresse"),
        "nl": ("Factuuradres", "Klant", "Gefactureerd aan"),
        "es": ("Facturar a", "Cliente", "Datos del cliente"),
        "it": ("Intestatario", "Cliente", "Fatturare a", "Spett.le"),
    },
    "seller": {
        "en": ("From", "Seller", "Supplier", "Provider", "Issued by"),
        "fr": ("Vendeur", "Fournisseur", "Émetteur", "Prestataire"),
        "de": ("Verkäufer", "Lieferant", "Rechnungssteller", "Absender"),
        "nl": ("Verkoper", "Leverancier", "Afzender"),
        "es": ("Vendedor", "Proveedor", "Emisor"),
        "it": ("Venditore", "Fornitore", "Cedente", "Mittente"),
    },
    "ship to": {
        "en": ("Ship to", "Delivery address", "Deliver to"),
        "fr": ("Livrer à", "Adresse de livraison"),
        "de": ("Lieferadresse", "Lieferanschrift", "Versand an"),
        "nl": ("Afleveradres", "Leveradres"),
        "es": ("Enviar a", "Dirección de entrega"),
        "it": ("Spedire a", "Indirizzo di consegna", "Destinazione merce"),
    },
}
"""Field → language → the wordings of its label."""

TITLES = {
    "en": ("INVOICE", "Invoice", "TAX INVOICE"),
    "fr": ("FACTURE", "Facture"),
    "de": ("RECHNUNG", "Rechnung"),
    "nl": ("FACTUUR", "Factuur"),
    "es": ("FACTURA", "Factura"),
    "it": ("FATTURA", "Fattura"),
}
HEADINGS = {
    "en": ("Description", "Qty", "Unit price", "Amount"),
    "fr": ("Désignation", "Qté", "Prix unitaire", "Montant"),
    "de": ("Bezeichnung", "Menge", "Einzelpreis", "Betrag"),
    "nl": ("Omschrijving", "Aantal", "Prijs", "Bedrag"),
    "es": ("Concepto", "Cant.", "Precio", "Importe"),
    "it": ("Descrizione", "Q.tà", "Prezzo", "Importo"),
}
UNIT_HEADING = {"en": "Unit", "fr": "Unité", "de": "Einheit", "nl": "Eenheid", "es": "Unidad", "it": "U.M."}
UNITS = {"en": ("pcs", "h", "ea"), "fr": ("pce", "h", "u."), "de": ("Stk.", "Std.", "St."), "nl": ("st.", "uur"),
         "es": ("ud.", "h", "uds."), "it": ("pz.", "ore", "n.")}  # fmt: skip
RATE_HEADING = {"en": "VAT %", "fr": "TVA %", "de": "MwSt. %", "nl": "Btw %", "es": "IVA %", "it": "IVA %"}
ADDRESS_KEYS = {  # a party written as keys and values: its name, its street, its town
    "en": ("Name", "Street", "City"),
    "fr": ("Nom", "Adresse", "Ville"),
    "de": ("Name", "Straße", "Ort"),
    "nl": ("Naam", "Adres", "Plaats"),
    "es": ("Nombre", "Dirección", "Ciudad"),
    "it": ("Nome", "Indirizzo", "Città"),
}
STAMPS = {"en": "PAID", "fr": "PAYÉ", "de": "BEZAHLT", "nl": "BETAALD", "es": "PAGADO", "it": "PAGATO"}
BANK = {"en": "Bank details", "fr": "Coordonnées bancaires", "de": "Bankverbindung", "nl": "Bankgegevens",
        "es": "Datos bancarios", "it": "Coordinate bancarie"}  # fmt: skip
VAT_ID = {"en": "VAT no.", "fr": "N° TVA", "de": "USt-IdNr.", "nl": "Btw-nr.", "es": "NIF", "it": "P.IVA"}
PAGE = {"en": "Page", "fr": "Page", "de": "Seite", "nl": "Pagina", "es": "Página", "it": "Pagina"}
MONTHS = {
    "en": "January February March April May June July August September October November December",
    "fr": "janvier février mars avril mai juin juillet août septembre octobre novembre décembre",
    "de": "Januar Februar März April Mai Juni Juli August September Oktober November Dezember",
    "nl": "januari februari maart april mei juni juli augustus september oktober november december",
    "es": "enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre",
    "it": "gennaio febbraio marzo aprile maggio giugno luglio agosto settembre ottobre novembre dicembre",
}
DATE_FORMATS = {
    "en": ("{d:02d}/{m:02d}/{y}", "{y}-{m:02d}-{d:02d}", "{d} {month} {y}", "{month} {d}, {y}", "{d} {mon} {y}"),
    "fr": ("{d:02d}/{m:02d}/{y}", "{d} {month} {y}", "{d:02d}.{m:02d}.{y}"),
    "de": ("{d:02d}.{m:02d}.{y}", "{d}. {month} {y}", "{y}-{m:02d}-{d:02d}"),
    "nl": ("{d:02d}-{m:02d}-{y}", "{d} {month} {y}", "{d:02d}/{m:02d}/{y}"),
    "es": ("{d:02d}/{m:02d}/{y}", "{d} de {month} de {y}", "{d:02d}-{m:02d}-{y}"),
    "it": ("{d:02d}/{m:02d}/{y}", "{d} {month} {y}", "{d:02d}.{m:02d}.{y}"),
}
NUMBERS = {  # (thousands separator, decimal mark, currency before or after, currencies)
    "en": ((",", ".", "before", ("£", "$", "€", "")), ("", ".", "after", ("GBP", "USD", ""))),
    "fr": ((" ", ",", "after", ("€", "EUR", "")),),
    "de": ((".", ",", "after", ("€", "EUR", "")), ("", ",", "after", ("€",))),
    "nl": ((".", ",", "before", ("€", "EUR", "")),),
    "es": ((".", ",", "after", ("€", "EUR", "")),),
    "it": ((".", ",", "before", ("€", "")), (".", ",", "after", ("EUR", "euro"))),
}


class Wording:
    """One page's language: the wording it gives each key, its date format and its number format."""

    def __init__(self, lang: str, rng: random.Random) -> None:
        self.lang, self.rng = lang, rng
        self.labels = {field: rng.choice(by_lang[lang]) for field, by_lang in KEYS.items()}
        self.colon = rng.random() < 0.7
        self.date_format = rng.choice(DATE_FORMATS[lang])
        sep, mark, where, currencies = rng.choice(NUMBERS[lang])
        self.number = (sep, mark, where, rng.choice(currencies))

    def label(self, field: str) -> str:
        return self.labels[field] + (":" if self.colon else "")

    def date(self, day: datetime.date) -> str:
        months = MONTHS[self.lang].split()
        month = months[day.month - 1]
        return self.date_format.format(d=day.day, m=day.month, y=day.year, month=month, mon=month[:3])

    def money(self, value: float) -> str:
        sep, mark, where, currency = self.number
        whole, frac = f"{value:.2f}".split(".")
        if sep:
            head = len(whole) % 3 or 3
            whole = sep.join([whole[:head]] + [whole[i : i + 3] for i in range(head, len(whole), 3)])
        text = f"{whole}{mark}{frac}"
        if not currency:
            return text
        glue = "" if currency in "£$" else " "
        return f"{currency}{glue}{text}" if where == "before" else f"{text} {currency}"
