"""More ways to ask each question kind of the synthetic layouts (``phrasings="extended"``).

The layouts ask every question kind in one to three wordings, and the held-out split
(:mod:`docjepa.data.split`) removes about one template in four from fine-tuning by a hash of its text. With so
few wordings a kind can lose all of its templates to the split by chance (the form's checkbox question lost
both), and a model that saw one or two wordings learns those strings rather than what they ask. Extended
phrasings give every kind three more wordings, keyed here by the kind's first original template; an invoice's keys
and parties get four to eight, the bare label among them ("Total", "Due date": what a user of ``docjepa extract``
types), because people ask for them in many ways. They are drawn from a random stream of their own, so a page, its
answers and which original template it asks are the same with and without them; only the wording of some questions
changes (each of a kind's templates, original or extra, is equally likely). The held-out split applies to the
extra wordings as to the originals.
"""

from __future__ import annotations

EXTRA: dict[str, tuple[str, ...]] = {
    # form
    "What is the {l}?": ("Tell me the {l}.", "What was filled in as {l}?", "Read the {l} off the form."),
    "Where is the {l} field?": (
        "Locate the {l} field.",
        "Show me the {l} box.",
        "Which part of the form holds the {l}?",
    ),
    "Which {g} option is checked?": (
        "Which {g} box has a tick?",
        "What was selected under {g}?",
        "For {g}, which choice is marked?",
    ),
    "Where is the signature?": ("Locate the signature.", "Show where it is signed.", "Where has someone signed?"),
    "What is the title of this form?": (
        "Show the form's heading.",
        "What is this form called?",
        "Locate the form name.",
    ),
    "Where is the signature date?": (
        "When was the form signed?",
        "Give the date next to the signature.",
        "What date is by the signature?",
    ),
    # invoice
    "What is the invoice number?": (
        "Give the invoice's number.",
        "Which invoice number is shown?",
        "What is the invoice #?",
        "Invoice number",
        "Invoice no.",
        "What number is this invoice?",
        "Which reference number does the invoice carry?",
    ),
    "What is the invoice date?": (
        "On what date was this invoiced?",
        "Give the date of the invoice.",
        "Which day is this invoice from?",
        "Invoice date",
        "When is the invoice dated?",
        "What is the date of issue?",
        "When was this bill issued?",
    ),
    "What is the due date?": (
        "When is payment due?",
        "Give the payment deadline.",
        "What is the last day to pay?",
        "Due date",
        "Payment due date",
        "By what date must the invoice be paid?",
        "When do I have to pay?",
        "When does payment fall due?",
    ),
    "Where is a date?": ("Find any date on the page.", "Point to a date.", "Which text is a date?"),
    "What is the total amount due?": (
        "How much do I owe?",
        "What is the balance due?",
        "How much has to be paid?",
        "Total",
        "Amount due",
        "What is the grand total?",
        "What is the total including tax?",
        "What is the amount payable?",
        "How much is the invoice for?",
    ),
    "What is the amount of line {n}?": (
        "How much is item line {n}?",
        "Give the line total of row {n}.",
        "What does line {n} come to?",
    ),
    "How many {i} were billed?": (
        "What number of {i} is charged?",
        "Give the quantity for {i}.",
        "How many units of {i}?",
    ),
    "Where is the billing address?": (
        "Locate the bill-to address.",
        "Who is the invoice addressed to?",
        "Show the customer's address.",
    ),
    "Where is the seller's address?": (
        "Who issued this invoice?",
        "Locate the vendor's address.",
        "Show the supplier's address.",
    ),
    "Where is the line-items table?": (
        "Locate the table of items.",
        "Show the list of billed items.",
        "Where are the charges itemised?",
    ),
    # business documents (the grammar's own templates: business.QUESTIONS, NAMES, PARTIES)
    "When were the goods delivered?": (
        "Delivery date",
        "What is the date of delivery?",
        "On which day was the delivery made?",
        "When did the delivery take place?",
    ),
    "What is the order number?": (
        "Order number",
        "PO number",
        "What is the purchase order number?",
        "Which order does this invoice belong to?",
    ),
    "What is the customer number?": (
        "Customer number",
        "Customer ID",
        "What is the client number?",
        "Under which number is the customer known?",
    ),
    "What is the subtotal?": (
        "Subtotal",
        "Net total",
        "What is the amount before tax?",
        "What is the total excluding tax?",
        "How much is it without VAT?",
    ),
    "How much tax is charged?": (
        "Tax",
        "VAT",
        "How much is the tax?",
        "What is the sales tax?",
        "Give the VAT total.",
        "How much VAT is added?",
    ),
    "Who is the buyer?": (
        "Buyer",
        "Customer name",
        "Who is the customer?",
        "Which company is billed?",
        "Who is buying?",
    ),
    "Who is the seller?": (
        "Seller",
        "Supplier name",
        "Who is the vendor?",
        "Who is the service provider?",
        "Who sold the goods?",
    ),
    "What is the billing address?": (
        "Bill to",
        "Give the customer's full address.",
        "Where is the buyer located?",
        "Show the invoice address.",
    ),
    "What is the seller's address?": (
        "Seller's address",
        "Give the supplier's full address.",
        "Where is the vendor located?",
        "Show the sender's company address.",
    ),
    "Where is the delivery address?": (
        "Ship to",
        "Shipping address",
        "Give the address the goods go to.",
        "Where should the goods be sent?",
    ),
    # receipt
    "What is the total?": ("Give the receipt total.", "What was the total cost?", "How much did it all come to?"),
    "What did {i} cost?": ("Give the price of {i}.", "How much was {i}?", "What was paid for {i}?"),
    "When was this purchase made?": (
        "Give the date of purchase.",
        "On what day was this bought?",
        "Which date is on the receipt?",
    ),
    "Where is the store name?": ("Locate the shop's name.", "What store is this from?", "Show the merchant name."),
    "How was it paid?": ("Give the method of payment.", "Was it cash or card?", "Which way did the customer pay?"),
    "Where is the total line?": (
        "Locate the line with the total.",
        "Show the total row.",
        "Which line gives the total?",
    ),
    # letter
    "Where is the sender's address?": (
        "Locate the sender's address.",
        "Show the return address.",
        "Where does the letter come from?",
    ),
    "Where is the recipient's address?": (
        "Locate the addressee.",
        "Who receives this letter?",
        "Show the inside address.",
    ),
    "What is the date of the letter?": (
        "Give the letter's date.",
        "On what day was this written?",
        "Which date heads the letter?",
    ),
    "Who signed the letter?": (
        "Give the signer's name.",
        "Whose signature closes the letter?",
        "Who signed off this letter?",
    ),
    "What is the subject?": (
        "Give the subject line.",
        "What does the letter concern?",
        "What is the letter's subject?",
    ),
    "Which company sent this letter?": (
        "Give the sending company.",
        "Whose letterhead is this?",
        "Which firm wrote this?",
    ),
    "Where is the second paragraph?": (
        "Locate paragraph two.",
        "Show the second block of body text.",
        "Which paragraph comes second?",
    ),
    # table
    "What is the {h} of {k}?": ("Give the {h} for {k}.", "Look up {h} in the row of {k}.", "Which {h} does {k} have?"),
    "Where is the {h} column?": ("Locate the {h} column.", "Show the column headed {h}.", "Which column lists {h}?"),
    "Where is the table header?": (
        "Locate the header row.",
        "Show the column headings.",
        "Which row names the columns?",
    ),
    "What is the title of the table?": (
        "Give the table's caption.",
        "What is this table called?",
        "Locate the table title.",
    ),
    "Where is the row for {k}?": (
        "Locate the {k} row.",
        "Show the line of the table for {k}.",
        "Which row is about {k}?",
    ),
    # multicolumn
    "Where is the headline?": ("Locate the article's title.", "Show the main heading.", "What is the headline?"),
    "Who wrote this article?": ("Give the author's name.", "Whose article is this?", "Who is the byline?"),
    "Where is the section about {s}?": (
        "Locate the {s} section.",
        "Show the part headed {s}.",
        "Which section covers {s}?",
    ),
    "Where is the {o} column?": (
        "Locate the {o} column of text.",
        "Show the {o} text column.",
        "Which is the {o} column?",
    ),
}
"""Extra wordings per question kind, keyed by the kind's first original template (same ``{fields}``)."""
