"""The words business documents print, in nine languages: the labels of their keys (with the synonyms and
abbreviations real documents use), titles, column headings, month names, number and date formats.

Used by :mod:`.business`. Each language's keys are tuples of wordings; a page picks one wording per key.
"""

from __future__ import annotations

import datetime
import random

LANGUAGES = ("en", "fr", "de", "nl", "es", "it", "pt", "pl", "cs")
LOCALES = {"en": "en_GB", "fr": "fr_FR", "de": "de_DE", "nl": "nl_NL", "es": "es_ES", "it": "it_IT", "pt": "pt_PT",
           "pl": "pl_PL", "cs": "cs_CZ"}  # fmt: skip
"""Faker's locale for each language's names, companies and addresses."""

KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    "number": {
        "en": ("Invoice no.", "Invoice #", "Invoice number", "Inv. No.", "Document no."),
        "fr": ("N° de facture", "Facture n°", "Numéro de facture", "N° facture"),
        "de": ("Rechnungsnummer", "Rechnungs-Nr.", "Rechnung Nr.", "Re.-Nr.", "Beleg-Nr."),
        "nl": ("Factuurnummer", "Factuurnr.", "Factuur nr."),
        "es": ("Nº de factura", "Número de factura", "Factura n.º", "N.º factura"),
        "it": ("Numero fattura", "Fattura n.", "N. fattura", "Fattura numero"),
        "pt": ("Fatura n.º", "N.º da fatura", "Número da fatura", "Fatura nº"),
        "pl": ("Faktura nr", "Numer faktury", "Nr faktury", "Faktura VAT nr"),
        "cs": ("Faktura č.", "Číslo faktury", "Daňový doklad č.", "Číslo dokladu"),
    },
    "date": {
        "en": ("Invoice date", "Date", "Date of issue", "Issue date"),
        "fr": ("Date de facture", "Date", "Date d'émission", "Émise le"),
        "de": ("Rechnungsdatum", "Datum", "Ausstellungsdatum", "Belegdatum"),
        "nl": ("Factuurdatum", "Datum", "Datum factuur"),
        "es": ("Fecha de factura", "Fecha", "Fecha de emisión"),
        "it": ("Data fattura", "Data", "Data di emissione", "Data documento"),
        "pt": ("Data da fatura", "Data", "Data de emissão", "Emitida em"),
        "pl": ("Data wystawienia", "Data", "Data faktury", "Wystawiono"),
        "cs": ("Datum vystavení", "Datum", "Vystaveno", "Den vystavení"),
    },
    "due date": {
        "en": ("Due date", "Payment due", "Pay by", "Due by"),
        "fr": ("Date d'échéance", "Échéance", "À payer avant le"),
        "de": ("Fälligkeitsdatum", "Fällig am", "Zahlbar bis", "Zahlungsziel"),
        "nl": ("Vervaldatum", "Te betalen voor", "Uiterste betaaldatum"),
        "es": ("Fecha de vencimiento", "Vencimiento", "Pagar antes de"),
        "it": ("Data di scadenza", "Scadenza", "Da pagare entro"),
        "pt": ("Data de vencimento", "Vencimento", "Pagar até", "Data limite de pagamento"),
        "pl": ("Termin płatności", "Płatne do", "Data płatności"),
        "cs": ("Datum splatnosti", "Splatnost", "Splatno do"),
    },
    "delivery date": {
        "en": ("Delivery date", "Shipped on", "Date of supply"),
        "fr": ("Date de livraison", "Livré le"),
        "de": ("Lieferdatum", "Leistungsdatum", "Geliefert am"),
        "nl": ("Leverdatum", "Geleverd op"),
        "es": ("Fecha de entrega", "Entregado el"),
        "it": ("Data di consegna", "Consegnato il"),
        "pt": ("Data de entrega", "Entregue em"),
        "pl": ("Data dostawy", "Data sprzedaży"),
        "cs": ("Datum dodání", "Datum zdanitelného plnění", "DUZP"),
    },
    "order number": {
        "en": ("Order no.", "PO number", "Purchase order", "Your order"),
        "fr": ("N° de commande", "Bon de commande", "Votre commande"),
        "de": ("Bestellnummer", "Auftrags-Nr.", "Ihre Bestellung"),
        "nl": ("Bestelnummer", "Ordernummer", "Uw order"),
        "es": ("Nº de pedido", "Pedido", "Su pedido"),
        "it": ("Numero ordine", "Ordine n.", "Vs. ordine"),
        "pt": ("N.º da encomenda", "Pedido n.º", "Sua encomenda"),
        "pl": ("Numer zamówienia", "Zamówienie nr", "Nr zamówienia"),
        "cs": ("Číslo objednávky", "Objednávka č.", "Vaše objednávka"),
    },
    "customer number": {
        "en": ("Customer no.", "Customer ID", "Account no."),
        "fr": ("N° client", "Code client", "Réf. client"),
        "de": ("Kundennummer", "Kunden-Nr.", "Kd.-Nr."),
        "nl": ("Klantnummer", "Klantnr.", "Debiteurnummer"),
        "es": ("Nº de cliente", "Código de cliente", "Cliente nº"),
        "it": ("Codice cliente", "Cliente n.", "Cod. cliente"),
        "pt": ("N.º de cliente", "Código do cliente", "Cliente n.º"),
        "pl": ("Numer klienta", "Nr klienta", "Kod klienta"),
        "cs": ("Číslo zákazníka", "Zákaznické číslo", "Č. odběratele"),
    },
    "subtotal": {
        "en": ("Subtotal", "Net amount", "Net total"),
        "fr": ("Total HT", "Sous-total", "Montant HT"),
        "de": ("Zwischensumme", "Nettobetrag", "Summe netto"),
        "nl": ("Subtotaal", "Totaal excl. btw", "Netto bedrag"),
        "es": ("Subtotal", "Base imponible", "Importe neto"),
        "it": ("Imponibile", "Subtotale", "Totale imponibile"),
        "pt": ("Subtotal", "Valor líquido", "Total sem IVA", "Base tributável"),
        "pl": ("Wartość netto", "Razem netto", "Suma netto"),
        "cs": ("Základ daně", "Mezisoučet", "Celkem bez DPH"),
    },
    "tax": {
        "en": ("VAT", "Tax", "Sales tax", "VAT amount", "Tax amount", "Total VAT"),
        "fr": ("TVA", "Montant TVA", "Total TVA"),
        "de": ("MwSt.", "USt.", "Mehrwertsteuer", "Umsatzsteuer"),
        "nl": ("BTW", "Btw-bedrag", "Btw"),
        "es": ("IVA", "Impuestos", "Cuota IVA"),
        "it": ("IVA", "Imposta", "Totale IVA"),
        "pt": ("IVA", "Impostos", "Valor do IVA", "Total de impostos"),
        "pl": ("VAT", "Kwota VAT", "Podatek VAT"),
        "cs": ("DPH", "Daň", "Výše DPH", "Celkem DPH"),
    },
    "total": {
        "en": ("Total", "Amount due", "Grand total", "Total due", "Balance due"),
        "fr": ("Total TTC", "Montant total", "Net à payer", "Total à payer"),
        "de": ("Gesamtbetrag", "Rechnungsbetrag", "Gesamtsumme", "Zu zahlen"),
        "nl": ("Totaal", "Te betalen", "Totaalbedrag", "Totaal incl. btw"),
        "es": ("Total", "Importe total", "Total a pagar", "Total factura"),
        "it": ("Totale", "Totale fattura", "Importo totale", "Totale da pagare"),
        "pt": ("Total", "Total a pagar", "Valor total", "Total com IVA"),
        "pl": ("Razem", "Do zapłaty", "Razem brutto", "Kwota do zapłaty"),
        "cs": ("Celkem", "Celkem k úhradě", "K úhradě", "Celkem s DPH"),
    },
    "buyer": {
        "en": ("Bill to", "Invoice to", "Customer", "Billed to", "Client", "Sold to"),
        "fr": ("Facturé à", "Client", "Adresse de facturation"),
        "de": ("Rechnungsempfänger", "Kunde", "Rechnungsadresse"),
        "nl": ("Factuuradres", "Klant", "Gefactureerd aan"),
        "es": ("Facturar a", "Cliente", "Datos del cliente"),
        "it": ("Intestatario", "Cliente", "Fatturare a", "Spett.le"),
        "pt": ("Cliente", "Faturar a", "Adquirente", "Dados do cliente"),
        "pl": ("Nabywca", "Kupujący", "Odbiorca", "Klient"),
        "cs": ("Odběratel", "Zákazník", "Příjemce", "Fakturační adresa"),
    },
    "seller": {
        "en": ("From", "Seller", "Supplier", "Provider", "Issued by", "Service provider", "Vendor"),
        "fr": ("Vendeur", "Fournisseur", "Émetteur", "Prestataire"),
        "de": ("Verkäufer", "Lieferant", "Rechnungssteller", "Absender"),
        "nl": ("Verkoper", "Leverancier", "Afzender"),
        "es": ("Vendedor", "Proveedor", "Emisor"),
        "it": ("Venditore", "Fornitore", "Cedente", "Mittente"),
        "pt": ("Fornecedor", "Vendedor", "Emitente", "Prestador"),
        "pl": ("Sprzedawca", "Dostawca", "Wystawca"),
        "cs": ("Dodavatel", "Prodávající", "Poskytovatel", "Vystavil"),
    },
    "ship to": {
        "en": ("Ship to", "Delivery address", "Deliver to"),
        "fr": ("Livrer à", "Adresse de livraison"),
        "de": ("Lieferadresse", "Lieferanschrift", "Versand an"),
        "nl": ("Afleveradres", "Leveradres"),
        "es": ("Enviar a", "Dirección de entrega"),
        "it": ("Spedire a", "Indirizzo di consegna", "Destinazione merce"),
        "pt": ("Enviar para", "Morada de entrega", "Local de entrega"),
        "pl": ("Adres dostawy", "Miejsce dostawy"),
        "cs": ("Dodací adresa", "Místo dodání"),
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
    "pt": ("FATURA", "Fatura", "Fatura-recibo"),
    "pl": ("FAKTURA", "Faktura VAT", "Faktura"),
    "cs": ("FAKTURA", "Faktura – daňový doklad", "Daňový doklad"),
}
HEADINGS = {
    "en": ("Description", "Qty", "Unit price", "Amount"),
    "fr": ("Désignation", "Qté", "Prix unitaire", "Montant"),
    "de": ("Bezeichnung", "Menge", "Einzelpreis", "Betrag"),
    "nl": ("Omschrijving", "Aantal", "Prijs", "Bedrag"),
    "es": ("Concepto", "Cant.", "Precio", "Importe"),
    "it": ("Descrizione", "Q.tà", "Prezzo", "Importo"),
    "pt": ("Descrição", "Qtd.", "Preço unitário", "Valor"),
    "pl": ("Nazwa", "Ilość", "Cena jedn.", "Wartość"),
    "cs": ("Označení", "Množství", "Cena/MJ", "Částka"),
}
UNIT_HEADING = {"en": "Unit", "fr": "Unité", "de": "Einheit", "nl": "Eenheid", "es": "Unidad", "it": "U.M.",
                "pt": "Unidade", "pl": "J.m.", "cs": "MJ"}  # fmt: skip
UNITS = {"en": ("pcs", "h", "ea"), "fr": ("pce", "h", "u."), "de": ("Stk.", "Std.", "St."), "nl": ("st.", "uur"),
         "es": ("ud.", "h", "uds."), "it": ("pz.", "ore", "n."), "pt": ("un.", "h", "pç."), "pl": ("szt.", "godz."),
         "cs": ("ks", "hod", "kus")}  # fmt: skip
RATE_HEADING = {"en": "VAT %", "fr": "TVA %", "de": "MwSt. %", "nl": "Btw %", "es": "IVA %", "it": "IVA %",
                "pt": "IVA %", "pl": "VAT %", "cs": "DPH %"}  # fmt: skip
ADDRESS_KEYS = {  # a party written as keys and values: its name, its street, its town
    "en": ("Name", "Street", "City"),
    "fr": ("Nom", "Adresse", "Ville"),
    "de": ("Name", "Straße", "Ort"),
    "nl": ("Naam", "Adres", "Plaats"),
    "es": ("Nombre", "Dirección", "Ciudad"),
    "it": ("Nome", "Indirizzo", "Città"),
    "pt": ("Nome", "Morada", "Localidade"),
    "pl": ("Nazwa", "Ulica", "Miejscowość"),
    "cs": ("Název", "Ulice", "Obec"),
}
BREAKDOWN = {  # the tax breakdown's column headings beside the page's own tax label: (rate, net, gross) wordings
    "en": (
        ("VAT rate", "Rate", "Tax rate"),
        ("Net", "Without VAT", "Taxable amount"),
        ("Gross", "With VAT", "Incl. VAT"),
    ),
    "fr": (("Taux TVA", "Taux"), ("Base HT", "HT"), ("TTC", "Montant TTC")),
    "de": (("MwSt.-Satz", "Steuersatz"), ("Netto", "Nettobetrag"), ("Brutto", "Bruttobetrag")),
    "nl": (("Btw-tarief", "Tarief"), ("Netto", "Excl. btw"), ("Bruto", "Incl. btw")),
    "es": (("Tipo IVA", "Tipo"), ("Base imponible", "Base"), ("Con IVA", "Bruto")),
    "it": (("Aliquota", "Aliquota IVA"), ("Imponibile",), ("Lordo", "Con IVA")),
    "pt": (("Taxa IVA", "Taxa"), ("Sem IVA", "Base"), ("Com IVA", "Bruto")),
    "pl": (("Stawka VAT", "Stawka"), ("Netto", "Wartość netto"), ("Brutto", "Wartość brutto")),
    "cs": (("Sazba DPH", "Sazba"), ("Bez DPH", "Základ"), ("S DPH", "Včetně DPH")),
}
STAMPS = {"en": "PAID", "fr": "PAYÉ", "de": "BEZAHLT", "nl": "BETAALD", "es": "PAGADO", "it": "PAGATO", "pt": "PAGO",
          "pl": "ZAPŁACONO", "cs": "ZAPLACENO"}  # fmt: skip
BANK = {"en": "Bank details", "fr": "Coordonnées bancaires", "de": "Bankverbindung", "nl": "Bankgegevens",
        "es": "Datos bancarios", "it": "Coordinate bancarie", "pt": "Dados bancários", "pl": "Dane do przelewu",
        "cs": "Bankovní spojení"}  # fmt: skip
VAT_ID = {"en": "VAT no.", "fr": "N° TVA", "de": "USt-IdNr.", "nl": "Btw-nr.", "es": "NIF", "it": "P.IVA", "pt": "NIF",
          "pl": "NIP", "cs": "DIČ"}  # fmt: skip
OTHER_NUMBERS: dict[str, dict[str, tuple[str, ...]]] = {
    "account": {
        "en": ("Bank account no.", "Bank acct.", "Bank account"),
        "fr": ("N° de compte", "Compte n°", "RIB"),
        "de": ("Konto-Nr.", "Kontonummer", "Konto"),
        "nl": ("Rekeningnr.", "Rekeningnummer", "Bankrekening"),
        "es": ("Nº de cuenta", "Cuenta", "Cuenta bancaria"),
        "it": ("C/C n.", "Conto n.", "Conto corrente"),
        "pt": ("Conta n.º", "N.º de conta", "NIB"),
        "pl": ("Nr konta", "Numer rachunku", "Rachunek"),
        "cs": ("Č. účtu", "Číslo účtu", "Účet"),
    },
    "registration": {
        "en": ("Company no.", "Reg. no.", "Registration number", "Company reg. no."),
        "fr": ("SIRET", "SIREN", "RCS", "N° SIRET"),
        "de": ("HRB", "Handelsregister", "Registernummer", "Amtsgericht HRB"),
        "nl": ("KvK-nr.", "KvK", "KvK-nummer"),
        "es": ("CIF", "Nº registro", "Registro mercantil"),
        "it": ("REA n.", "C.F.", "Codice fiscale", "N. REA"),
        "pt": ("NIPC", "Matrícula n.º", "CRC n.º"),
        "pl": ("REGON", "KRS", "Nr KRS"),
        "cs": ("IČO", "IČ", "Reg. č."),
    },
    "tax id": {
        "en": ("VAT no.", "VAT reg. no.", "Tax ID"),
        "fr": ("N° TVA", "N° TVA intracom.", "TVA intracommunautaire"),
        "de": ("USt-IdNr.", "Steuernummer", "St.-Nr."),
        "nl": ("Btw-nr.", "Btw-nummer", "Btw-id"),
        "es": ("NIF", "NIF-IVA", "Nº IVA"),
        "it": ("P.IVA", "Partita IVA", "P. IVA n."),
        "pt": ("NIF", "N.º contribuinte", "NIF/NIPC"),
        "pl": ("NIP", "Nr NIP", "NIP UE"),
        "cs": ("DIČ", "DIČ č.", "DIČ/VAT"),
    },
    "phone": {
        "en": ("Tel.", "Phone", "Tel. no."),
        "fr": ("Tél.", "Téléphone"),
        "de": ("Tel.", "Telefon"),
        "nl": ("Tel.", "Telefoon"),
        "es": ("Tel.", "Teléfono"),
        "it": ("Tel.", "Telefono"),
        "pt": ("Tel.", "Telefone"),
        "pl": ("Tel.", "Telefon"),
        "cs": ("Tel.", "Telefon"),
    },
}
"""The numbers an invoice prints besides the ones asked for, keyed as its language keys them (kind → language →
wordings): bank account, company registration, tax id, phone. Their keys end as the invoice number's often do ("no.",
"n°", "č."), so which number a question asks for is told by the key's words, not by its being a number after a key."""
COUNTRY = {"en": ("GB", "44"), "fr": ("FR", "33"), "de": ("DE", "49"), "nl": ("NL", "31"), "es": ("ES", "34"),
           "it": ("IT", "39"), "pt": ("PT", "351"), "pl": ("PL", "48"), "cs": ("CZ", "420")}  # fmt: skip
"""Language → (country code, telephone prefix) for the other numbers' values."""


def other_number(kind: str, lang: str, rng: random.Random) -> tuple[str, str]:
    """One of :data:`OTHER_NUMBERS`: (its key, its value) as a page in ``lang`` prints them."""
    key, (country, prefix) = rng.choice(OTHER_NUMBERS[kind][lang]), COUNTRY[lang]

    def digits(n: int) -> str:
        return "".join(rng.choice("0123456789") for _ in range(n))

    if kind == "account" and lang == "cs":  # the Czech account number with its bank's code
        return key, f"{digits(rng.randint(6, 10))}/{rng.choice(['0100', '0300', '0800', '2010', '5500'])}"
    if kind == "account" and lang == "pl":
        return key, " ".join([digits(2)] + [digits(4) for _ in range(6)])
    if kind == "registration" and lang == "fr":  # SIRET
        return key, f"{digits(3)} {digits(3)} {digits(3)} {digits(5)}"
    if kind == "registration" and lang == "de":
        return key, digits(5) if "HRB" in key else f"HRB {digits(5)}"
    if kind == "tax id":
        return key, f"{digits(3)}/{digits(3)}/{digits(5)}" if key == "St.-Nr." else f"{country}{digits(9)}"
    if kind == "phone":
        return key, f"+{prefix} {digits(3)} {digits(3)} {digits(3)}"
    return key, digits(rng.choice([8, 9, 10]))


SHARED_WORDS: dict[tuple[str, str], dict[str, tuple[tuple[str, str], ...]]] = {
    ("date", "due date"): {
        "en": (("Invoice date", "Invoice due date"), ("Date of invoice", "Due date of invoice"),
               ("Invoice issue date", "Invoice payment date"), ("Date", "Payment due date")),
        "fr": (("Date de facture", "Date d'échéance de la facture"), ("Date de la facture", "Date de paiement"),
               ("Date d'émission", "Date d'échéance"), ("Date", "Date limite de paiement")),
        "de": (("Rechnungsdatum", "Fälligkeitsdatum der Rechnung"), ("Datum", "Fälligkeitsdatum"),
               ("Datum der Rechnung", "Zahlungsdatum"), ("Rechnungsdatum", "Rechnung zahlbar bis")),
        "nl": (("Factuurdatum", "Vervaldatum factuur"), ("Datum", "Vervaldatum"),
               ("Datum factuur", "Uiterste betaaldatum")),
        "es": (("Fecha de factura", "Fecha de vencimiento de la factura"), ("Fecha", "Fecha de vencimiento"),
               ("Fecha de emisión", "Fecha de pago"), ("Fecha de la factura", "Fecha límite de pago")),
        "it": (("Data fattura", "Data scadenza fattura"), ("Data", "Data di scadenza"),
               ("Data di emissione", "Data di pagamento"), ("Data documento", "Data scadenza documento")),
        "pt": (("Data da fatura", "Data de vencimento da fatura"), ("Data", "Data de vencimento"),
               ("Data de emissão", "Data limite de pagamento"), ("Data da fatura", "Data de pagamento")),
        "pl": (("Data wystawienia faktury", "Termin płatności faktury"), ("Data", "Data płatności"),
               ("Data faktury", "Data zapłaty faktury")),
        "cs": (("Datum vystavení faktury", "Datum splatnosti faktury"), ("Datum", "Datum splatnosti"),
               ("Datum vystavení dokladu", "Datum splatnosti dokladu")),
    },
    ("tax", "total"): {
        "en": (("Tax", "Total with tax"), ("VAT", "Total incl. VAT"), ("Tax amount", "Amount incl. tax"),
               ("VAT amount", "Amount due incl. VAT")),
        "fr": (("TVA", "Total TVA comprise"), ("Montant TVA", "Montant TTC"), ("Taxes", "Total avec taxes")),
        "de": (("MwSt.", "Gesamt inkl. MwSt."), ("USt.", "Summe inkl. USt."),
               ("Mehrwertsteuer", "Brutto mit Mehrwertsteuer")),
        "nl": (("Btw", "Totaal incl. btw"), ("Btw-bedrag", "Bedrag incl. btw"), ("BTW", "Te betalen incl. BTW")),
        "es": (("IVA", "Total con IVA"), ("Impuestos", "Total con impuestos"), ("Cuota IVA", "Total IVA incluido")),
        "it": (("IVA", "Totale IVA inclusa"), ("Imposta", "Totale con imposta"), ("Totale IVA", "Totale fattura")),
        "pt": (("IVA", "Total com IVA"), ("Impostos", "Total com impostos"), ("Valor do IVA", "Valor total com IVA")),
        "pl": (("VAT", "Razem z VAT"), ("Kwota VAT", "Kwota brutto z VAT"), ("Podatek VAT", "Do zapłaty z VAT")),
        "cs": (("DPH", "Celkem s DPH"), ("Daň", "Celkem s daní"), ("Výše DPH", "K úhradě s DPH")),
    },
}  # fmt: skip
"""Pairs of keys one page may print for two of its fields, worded alike ("Invoice date" and "Invoice due date", "VAT"
and "Total incl. VAT"), keyed by the two fields and the language: the question is then answered by the word that
tells the keys apart, not by the words they share."""


PAGE = {"en": "Page", "fr": "Page", "de": "Seite", "nl": "Pagina", "es": "Página", "it": "Pagina", "pt": "Página",
        "pl": "Strona", "cs": "Strana"}  # fmt: skip
MONTHS = {
    "en": "January February March April May June July August September October November December",
    "fr": "janvier février mars avril mai juin juillet août septembre octobre novembre décembre",
    "de": "Januar Februar März April Mai Juni Juli August September Oktober November Dezember",
    "nl": "januari februari maart april mei juni juli augustus september oktober november december",
    "es": "enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre",
    "it": "gennaio febbraio marzo aprile maggio giugno luglio agosto settembre ottobre novembre dicembre",
    "pt": "janeiro fevereiro março abril maio junho julho agosto setembro outubro novembro dezembro",
    "pl": "stycznia lutego marca kwietnia maja czerwca lipca sierpnia września października listopada grudnia",
    "cs": "ledna února března dubna května června července srpna září října listopadu prosince",
}
DATE_FORMATS = {
    "en": ("{d:02d}/{m:02d}/{y}", "{y}-{m:02d}-{d:02d}", "{d} {month} {y}", "{month} {d}, {y}", "{d} {mon} {y}"),
    "fr": ("{d:02d}/{m:02d}/{y}", "{d} {month} {y}", "{d:02d}.{m:02d}.{y}"),
    "de": ("{d:02d}.{m:02d}.{y}", "{d}. {month} {y}", "{y}-{m:02d}-{d:02d}"),
    "nl": ("{d:02d}-{m:02d}-{y}", "{d} {month} {y}", "{d:02d}/{m:02d}/{y}"),
    "es": ("{d:02d}/{m:02d}/{y}", "{d} de {month} de {y}", "{d:02d}-{m:02d}-{y}"),
    "it": ("{d:02d}/{m:02d}/{y}", "{d} {month} {y}", "{d:02d}.{m:02d}.{y}"),
    "pt": ("{d:02d}/{m:02d}/{y}", "{d} de {month} de {y}", "{d} de {mon}. de {y}", "{d:02d}-{m:02d}-{y}"),
    "pl": ("{d:02d}.{m:02d}.{y}", "{y}-{m:02d}-{d:02d}", "{d} {month} {y}"),
    "cs": ("{d}. {m}. {y}", "{d:02d}.{m:02d}.{y}", "{d}. {month} {y}", "{d}.{m}.{y}"),
}
NUMBERS = {  # (thousands separator, decimal mark, currency before or after, currencies)
    "en": ((",", ".", "before", ("£", "$", "€", "")), ("", ".", "after", ("GBP", "USD", ""))),
    "fr": ((" ", ",", "after", ("€", "EUR", "")),),
    "de": ((".", ",", "after", ("€", "EUR", "")), ("", ",", "after", ("€",))),
    "nl": ((".", ",", "before", ("€", "EUR", "")),),
    "es": ((".", ",", "after", ("€", "EUR", "")),),
    "it": ((".", ",", "before", ("€", "")), (".", ",", "after", ("EUR", "euro"))),
    "pt": ((".", ",", "after", ("€", "EUR", "")), (" ", ",", "after", ("€",)), (".", ",", "before", ("R$",))),
    "pl": ((" ", ",", "after", ("zł", "PLN", "")), (".", ",", "after", ("zł",))),
    "cs": ((" ", ",", "after", ("Kč", "CZK", "")), ("", ",", "after", ("Kč",))),
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

    def share_words(self, fields: tuple[str, str], rng: random.Random) -> None:
        """Key the two ``fields`` by one of :data:`SHARED_WORDS`' pairs of the page's language, drawn from ``rng``."""
        self.labels[fields[0]], self.labels[fields[1]] = rng.choice(SHARED_WORDS[fields][self.lang])

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
        glue = "" if currency in ("£", "$") else " "
        return f"{currency}{glue}{text}" if where == "before" else f"{text} {currency}"
